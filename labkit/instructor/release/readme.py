"""The edition's README.md: docs/students/README.md, with the table of the C exercises (what
waits for which, from C_EXERCISES) where its marker line is.  The instructor's README leads
every audience into docs/, the instructors' pages among them; the edition's is the students'
(labkit.instructor.release.edition writes this one in its place)."""

from __future__ import annotations

from ...stubs.catalog import C_EXERCISES

TEMPLATE = "docs/students/README.md"
MARKER = "<!-- labkit: the C exercises -->"


def exercise_table() -> str:
    """The C exercises as a Markdown table: where each is, and what cannot be measured
    until it is done."""
    rows = ["| exercise | notebook | your function | in | until it is done, not measurable |",
            "|---|---|---|---|---|"]
    for exercise in C_EXERCISES:
        rows.append(f"| {exercise.label} | `{exercise.notebook}.ipynb` | `{exercise.function}()` | "
                    f"`csrc/{exercise.source}` | {exercise.uses} |")
    return "\n".join(rows)


def render(template: str) -> str:
    """`template` (docs/students/README.md's text) with the exercise table at its marker."""
    if MARKER not in template:
        from ...errors import LabError

        raise LabError(f"{TEMPLATE} has no line {MARKER}", "put it where the table of the C exercises goes")
    return template.replace(MARKER, exercise_table())
