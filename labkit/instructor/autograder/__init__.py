"""Grading where the course already grades: Gradescope's autograder and PrairieLearn's
external grader, from one command each, with the same grading as `labkit grade`.

  platforms: each platform as a declaration (where the submission and the results lie,
             and its results.json written from labkit's gradebook rows)
  package:   `labkit autograder gradescope|prairielearn --out ...`: the zip, or the folder
             (Dockerfile, info.json's grading options, the entrypoint), with the instructor's
             lab inside (PrairieLearn's public image: the edition; the instructor's side for the
             course's serverFilesCourse, put back together per grading)
  entry:     inside the platform's container, per submission: the handed-in notebooks graded
             by labkit.instructor.course.class_grades, the platform's results.json written, what the
             container cannot do named in it
  leaderboard: the capstone's leaderboard on Gradescope, measured by the grader on the
             student's server, in a process of its own under a grading uid
  commands:  the command line's `labkit autograder ...`
"""
