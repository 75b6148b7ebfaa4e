"""What a hostile student's cell does to a grader, written once for the tests that hand one in."""

RESULTS = ["/autograder/results/results.json", "/grade/results/results.json"]  # Gradescope's, PrairieLearn's


def forge_results(places: list[str]) -> str:
    """A cell's source that writes a perfect results.json at each of `places` (where the
    platforms read theirs) and prints what it managed: a grader must overwrite or ignore it."""
    return f"""import json, os
forged = {{"score": 999, "gradable": True, "tests": [{{"name": "forged", "score": 999, "points": 1, "max_points": 1}}]}}
for place in {places!r}:
    try:
        os.makedirs(os.path.dirname(place), exist_ok=True)
        with open(place, "w") as out:
            json.dump(forged, out)
        print("FORGED", place)
    except OSError as error:
        print("refused", place, error)
"""
