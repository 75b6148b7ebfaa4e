"""The course's round trip with its LMS: collect, grade, hand back.

    labkit collect --from canvas DOWNLOAD.zip --roster roster.csv --out submissions/   (lms.collect)
    labkit grade submissions/ --out grades/                                          (instructor.course.class_grades)
    labkit gradebook grades/ --format canvas --roster roster.csv --due ... --late-penalty ...  (lms.books)
    labkit feedback grades/ --zip --lms canvas                                       (lms.returns)

collect.py, books.py and returns.py are those three jobs (their command lines:
labkit.instructor.course.lms_commands);
archive.py reads a download without trusting it, roster.py the class list, sources.py how
each LMS names a student's file, late.py due dates and penalties, times.py submission
times as nbgrader writes them (timestamp.txt).
"""
