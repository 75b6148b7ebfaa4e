"""The instructor's side of the lab, a room per job.

  release/   `labkit release`: the students' edition
             edition: solutions -> stubs, hidden checks removed; readme: the edition's README
  grading/   `labkit grade`: a class into a gradebook, one notebook at a time
             grade: a class (here or on a cluster); grader: one student's notebook, its two runs,
             its gradebook rows and feedback page; check_cells: the checks of a notebook and the
             student's notebook as it runs at grading; exports: the values a graded run hands
             to the checks, as plain data; checker: the checks process, under another uid;
             hand: written answers marked by a person; submissions: what students handed in,
             read without following links; outcomes: how a graded run ended, in one vocabulary;
             run_lab: the lab a graded run works in
  sandbox/   one isolated run
             run: from outside (work folders, limits, timeout, clean-up); isolation: its walls
             (cgroup, namespaces, root); uids: a uid per run, leased and emptied; watch: its
             time, disk, memory, a fork bomb; runner: inside, under the student's uid
  cluster/   grading on Dask: tasks (every student x notebook as one task); gate (what each
             certificate's role may do); certs (the cluster's certificates, mutual TLS)
  lms/       the LMS round trip: a class collected from its downloads, marks handed back
  autograder/ grading on Gradescope or PrairieLearn: platforms (each as a declaration, its
             results.json from the gradebook's rows); package (the zip, the image's folder);
             run (inside the platform's container: one submission graded); commands

Figures and tables for slides are labkit.publish; what a student's notebook imports to
check itself is labkit.exercises.  The files checks, predictions, c_exercises,
c_exercise_catalog and c_exercise_shed here are the exercises' old names, kept for notebooks
and editions handed out before, and exports and gate the old names of grading.exports (a
graded notebook's records) and cluster.gate (a worker's `--preload`): each gives the very
module it became.  Importing this package, or any of its rooms, imports nothing
(sandbox/runner.py relies on it).
"""
