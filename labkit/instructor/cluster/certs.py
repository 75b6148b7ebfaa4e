"""The grading cluster's certificates: who may talk to whom, decided by the TLS handshake.

    labkit cluster init DIR          three certificate authorities, one per role, and a
                                     certificate for each role, signed by its role's CA:

    DIR/ca/          the three CAs' keys: they stay with the instructor (new certificates)
    DIR/scheduler/   cert.pem key.pem trust.pem   -> the scheduler's host
    DIR/worker/      cert.pem key.pem trust.pem   -> every grading worker
    DIR/grader/      cert.pem key.pem trust.pem   -> the instructor's machine (labkit grade)

Each role trusts only the CAs of the roles that may open a connection to it or accept
one from it (trust.pem), so the handshake itself enforces the cluster's shape:

    scheduler  trusts the worker CA and the grader CA   (workers register, the grader submits)
    worker     trusts the scheduler CA                  (only the scheduler reaches a worker)
    grader     trusts the scheduler CA                  (the grader talks to the scheduler only)

A client with no certificate, or one from another CA, fails the handshake before Dask
reads a byte; a worker's certificate cannot reach another worker, nor pose as the
scheduler to one.  What a role may ask of the scheduler once connected is gate.py's job.
Dask sets check_hostname off (distributed.security: a cluster CA, addresses not names),
so the role, not the host name, is what a certificate proves.

Keys are EC P-256, written 0600 in folders 0700: only their owner (root, run as root)
reads them.  Certificates expire after --days (a term, 180 by default); `labkit doctor`
says how long each has left, and every labkit command refuses an expired one with the fix.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import LabError

ROLES = ("scheduler", "worker", "grader")
TRUSTS = {"scheduler": ("worker", "grader"), "worker": ("scheduler",), "grader": ("scheduler",)}
CERTS_ENV = "LABKIT_CLUSTER_CERTS"
DEFAULT_DIR = Path("/etc/labkit/cluster")
DEFAULT_DAYS = 180
ORGANISATION = "labkit grading cluster"
MAKE_THEM = "make the course's certificates with: sudo labkit cluster init DIR (docs/instructors/cluster.md)"


def _x509():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise LabError("the cryptography package is not installed",
                       "install labkit's grading extra: pip install '.[grading]' in the lab's checkout "
                       "(make setup does)") from None
    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


# ---------------------------------------------------------------------------
# making them


def _name(course: str, common: str, role: str):
    x509, *_, NameOID = _x509()
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, f"{ORGANISATION}: {course}"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _issue(subject, issuer, public_key, signing_key, *, ca: bool, not_before, not_after):
    x509, hashes, _, _, ExtendedKeyUsageOID, _ = _x509()
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
               .serial_number(x509.random_serial_number()).not_valid_before(not_before)
               .not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    else:  # every role is both a TLS server and a TLS client in Dask (the scheduler dials its workers)
        builder = builder.add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def _pem(cert) -> bytes:
    _, _, serialization, *_ = _x509()
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    _, _, serialization, *_ = _x509()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def init(folder: Path | str, course: str = "course", days: int = DEFAULT_DAYS, *,
         now: datetime.datetime | None = None, force: bool = False) -> Path:
    """Make the three CAs and the three role certificates under `folder` (see the module's
    docstring).  `now` moves the validity window (the tests make expired ones with it).
    An existing set is refused unless `force`: new CAs would lock out every machine that has
    the old ones."""
    *_, ec, _, _ = _x509()
    if days < 1:
        raise LabError(f"--days {days}: a certificate must be valid for at least a day", "use --days 1 or more")
    folder = Path(folder)
    if (folder / "ca").exists() and not force:
        raise LabError(f"{folder} already holds a course's certificates",
                       "keep them (every machine of the cluster has copies), or make new ones with --force "
                       "and copy them to every machine again")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    (folder / "ca").mkdir(mode=0o700, exist_ok=True)
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(course, f"labkit {role} CA", role)
        cert = _issue(name, name, key.public_key(), key, ca=True, not_before=not_before, not_after=not_after)
        _write(folder / "ca" / f"{role}-ca.pem", _pem(cert), 0o644)
        _write(folder / "ca" / f"{role}-ca.key", _key_pem(key), 0o600)
    for role in ROLES:
        issue(folder, role, days=days, now=now)
    return folder


def issue(folder: Path | str, role: str, *, days: int = DEFAULT_DAYS, now: datetime.datetime | None = None,
          into: Path | str | None = None) -> Path:
    """A new certificate for `role`, signed by its CA in `folder`/ca (made by init), written with a
    new key and the role's trust.pem into `into` (default `folder`/role)."""
    x509, _, serialization, ec, _, NameOID = _x509()
    folder = Path(folder)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    ca_cert = x509.load_pem_x509_certificate((folder / "ca" / f"{role}-ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((folder / "ca" / f"{role}-ca.key").read_bytes(), password=None)
    course = ca_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value.removeprefix(
        f"{ORGANISATION}: ")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(_name(course, f"labkit {role}", role), ca_cert.subject, key.public_key(), ca_key, ca=False,
                  not_before=now - datetime.timedelta(minutes=5), not_after=now + datetime.timedelta(days=days))
    place = Path(into or folder / role)
    place.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(place, 0o700)
    _write(place / "cert.pem", _pem(cert), 0o600)
    _write(place / "key.pem", _key_pem(key), 0o600)
    _write(place / "trust.pem", b"".join((folder / "ca" / f"{other}-ca.pem").read_bytes() for other in TRUSTS[role]),
           0o600)
    return place


def where_to_copy(folder: Path) -> str:
    """The lines `labkit cluster init` prints: which folder goes to which machine."""
    return "\n".join([
        f"made the grading cluster's certificates in {folder} (only their owner can read them):",
        f"  {folder}/scheduler/  -> the scheduler's host, as {DEFAULT_DIR}/scheduler/  (labkit scheduler)",
        f"  {folder}/worker/     -> every grading worker, as {DEFAULT_DIR}/worker/     (labkit worker tls://...)",
        f"  {folder}/grader/     -> your machine, as {DEFAULT_DIR}/grader/ or {CERTS_ENV}=...  (labkit grade)",
        f"  {folder}/ca/         -> nowhere: the CAs' keys stay here, offline if you can",
        "copy with permissions kept, e.g.: "
        "sudo rsync -a --chmod=go= DIR/worker/ root@worker:/etc/labkit/cluster/worker/",
        f"every machine then finds its folder in {DEFAULT_DIR}/<role>/ (or give --certs DIR).",
    ])


# ---------------------------------------------------------------------------
# using them


@dataclass(frozen=True)
class RoleCerts:
    """One role's three files, checked: the certificate is the role's, in date, and matches its key."""
    role: str
    folder: Path
    subject: str
    expires: datetime.datetime

    @property
    def cert(self) -> Path:
        return self.folder / "cert.pem"

    @property
    def key(self) -> Path:
        return self.folder / "key.pem"

    @property
    def trust(self) -> Path:
        return self.folder / "trust.pem"

    def security(self):
        """Dask's Security for this role: mutual TLS, encryption required."""
        from distributed.security import Security

        files = {f"tls_{'client' if self.role == 'grader' else self.role}_{part}": str(path)
                 for part, path in (("cert", self.cert), ("key", self.key))}
        return Security(tls_ca_file=str(self.trust), require_encryption=True, **files)

    def dask_flags(self) -> list[str]:
        """The same, as `dask scheduler` / `dask worker` flags."""
        return ["--tls-ca-file", str(self.trust), "--tls-cert", str(self.cert), "--tls-key", str(self.key)]

    def days_left(self, now: datetime.datetime | None = None) -> float:
        now = now or datetime.datetime.now(datetime.timezone.utc)
        return (self.expires - now).total_seconds() / 86400


def folder_for(role: str, certs: Path | str | None = None) -> Path:
    """Where `role`'s files are: --certs (a role's folder, or the folder `cluster init` made),
    else $LABKIT_CLUSTER_CERTS, else /etc/labkit/cluster, each tried as <it>/<role> first."""
    base = Path(certs or os.environ.get(CERTS_ENV) or DEFAULT_DIR)
    return base / role if (base / role / "cert.pem").exists() else base


def load(role: str, certs: Path | str | None = None, *, now: datetime.datetime | None = None) -> RoleCerts:
    """`role`'s certificate, key and trusted CAs, or a LabError saying what is wrong and how to
    fix it: missing, readable by others, another role's, not yet or no longer valid, another key."""
    x509, _, serialization, *_ = _x509()
    folder = folder_for(role, certs)
    paths = {name: folder / f"{name}.pem" for name in ("cert", "key", "trust")}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise LabError(f"no {role} certificate for the grading cluster: {', '.join(missing)} missing",
                       f"{MAKE_THEM}, copy its {role}/ folder here, or give --certs DIR "
                       f"(or {CERTS_ENV}=DIR)")
    if paths["key"].stat().st_mode & 0o077:
        raise LabError(f"{paths['key']} can be read by other users: anyone who copies it is the {role}",
                       f"chmod 600 {paths['key']} (and chmod 700 {folder})")
    try:
        cert = x509.load_pem_x509_certificate(paths["cert"].read_bytes())
        key = serialization.load_pem_private_key(paths["key"].read_bytes(), password=None)
        x509.load_pem_x509_certificates(paths["trust"].read_bytes())
    except (ValueError, TypeError) as problem:
        raise LabError(f"the {role} files in {folder} cannot be read as PEM ({problem})", MAKE_THEM) from None
    subject = cert.subject.rfc4514_string()
    if role_of(cert) != role:
        raise LabError(f"{paths['cert']} is a certificate for {role_of(cert) or 'no lab role'} ({subject}), "
                       f"not for the {role}", f"use the {role}/ folder that labkit cluster init made")
    if cert.public_key().public_numbers() != key.public_key().public_numbers():
        raise LabError(f"{paths['key']} is not the key of {paths['cert']}",
                       f"copy the {role}/ folder whole, as labkit cluster init made it")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if now > cert.not_valid_after_utc:
        raise LabError(f"the {role} certificate {paths['cert']} expired on "
                       f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC",
                       "make the course's certificates again (labkit cluster init DIR --force) and copy them to "
                       "every machine of the cluster")
    if now < cert.not_valid_before_utc:
        raise LabError(f"the {role} certificate {paths['cert']} is valid only from "
                       f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC", "check this machine's clock (timedatectl)")
    return RoleCerts(role, folder, subject, cert.not_valid_after_utc)


def role_of(cert) -> str | None:
    """The lab role a certificate was made for (its subject's OU), or None."""
    x509, *_, NameOID = _x509()
    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    return units[0].value if units and units[0].value in ROLES else None


def role_in(folder: Path) -> str | None:
    """The role of the certificate at the top of `folder` (a role's own folder), or None."""
    x509, *_ = _x509()
    try:
        return role_of(x509.load_pem_x509_certificate((Path(folder) / "cert.pem").read_bytes()))
    except (OSError, ValueError):
        return None


def require_tls(address: str, who: str) -> None:
    """Refuse a plaintext address: on a shared network it hands the grading workers to anyone."""
    if not address.startswith("tls://"):
        scheme = address.split("://", 1)[0] + "://" if "://" in address else "no scheme"
        raise LabError(f"{who} refuses {address} ({scheme}): a grading cluster speaks mutual TLS only, "
                       "because a plaintext Dask scheduler runs anyone's code on the workers, as root",
                       f"{MAKE_THEM}; start the scheduler with labkit scheduler, and give its tls://HOST:PORT")
