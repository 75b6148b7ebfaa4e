"""`labkit grade --scheduler tls://ADDRESS`: grading on a Dask cluster of grading machines.

  tasks.py   every student x notebook as one task, its payload and its result
  gate.py    least privilege: a Dask preload (`--preload labkit.instructor.cluster.gate`)
             that lets each certificate's role do only what grading needs
  certs.py   the cluster's certificates (mutual TLS): who may talk to whom

Importing this package imports nothing.
"""
