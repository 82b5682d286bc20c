"""Where signed checkpoints and their keys live on disk: the operator's checkpoint directory and key files.

Called by the archiver's checkpointer (``events.audit.checkpointer``: the newest checkpoint, writing the
next), by ``fedsched audit keygen`` (a key pair), ``fedsched audit chain --verify --public-key`` and
``fedsched audit proof`` (reading checkpoints and public keys). Calls the file system; parses and checks
through the pure ``events.audit.checkpoint``.

The directory is the trust anchor outside the database: put it where the archive's database cannot
write (another volume, host or account; an object store's write-once bucket behind a sync). One file
per checkpoint, ``checkpoint-<seq>.json`` (the seq zero-padded to 12 digits so names sort), written
atomically and never replaced: the bytes go to a temporary file beside it, are flushed to disk, then
linked to the final name (which fails if that name exists: two archivers never sign one number twice),
and the directory is flushed too.

The private key is an unencrypted PKCS#8 PEM file, as ``fedsched audit keygen`` writes it (mode 0600);
one that other users may read is refused, and one its group may read is used with a warning. It is
named by a path (``--signing-key`` or ``FEDSCHED_AUDIT_SIGNING_KEY_FILE``), never given on a command
line. A public key is a PEM file (SubjectPublicKeyInfo) or the raw key as 64 hex digits.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from events.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointProblem,
    Fault,
    check_series,
    file_name,
    key_id,
    parse,
    seq_of_file_name,
)

log = logging.getLogger("fedsched.audit")

SIGNING_KEY_ENV = "FEDSCHED_AUDIT_SIGNING_KEY_FILE"
CHECKPOINT_DIR_ENV = "FEDSCHED_AUDIT_CHECKPOINT_DIR"
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024
_RAW_KEY = re.compile(r"[0-9a-fA-F]{64}\Z")


class KeyFileError(ValueError):
    """A key file cannot be used: the message names the file and the reason."""


class CheckpointDir:
    """The operator's directory of checkpoint files."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def ensure(self) -> None:
        """Create the directory if needed and check that this process can write it (a clear error at start
        rather than at the first checkpoint)."""
        self.path.mkdir(parents=True, exist_ok=True)
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise PermissionError(f"checkpoint directory {self.path}: this process cannot write it")

    def files(self) -> list[tuple[int, Path]]:
        """Every checkpoint file (by the seq its name gives), in seq order."""
        found = []
        for entry in self.path.iterdir():
            seq = seq_of_file_name(entry.name)
            if seq is not None and entry.is_file():
                found.append((seq, entry))
        return sorted(found)

    def newest(self) -> tuple[str, Checkpoint] | None:
        """The checkpoint with the highest number, parsed (``CheckpointError`` if it is not one)."""
        files = self.files()
        if not files:
            return None
        seq, path = files[-1]
        return str(path), _read(path, expected_seq=seq)

    def write(self, checkpoint: Checkpoint) -> Path:
        """Write ``checkpoint`` as its file, atomically; ``FileExistsError`` if its number is taken."""
        final = self.path / file_name(checkpoint.seq)
        temporary = self.path / f".{final.name}.{os.getpid()}.tmp"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(descriptor, "wb") as out:
                out.write(checkpoint.to_bytes())
                out.flush()
                os.fsync(out.fileno())
            _link_exclusively(temporary, final)
        finally:
            temporary.unlink(missing_ok=True)
        _flush_directory(self.path)
        return final

    def read_all(self) -> tuple[list[tuple[str, Checkpoint]], list[CheckpointProblem]]:
        """Every checkpoint file parsed, and a problem for each that is not a checkpoint."""
        found: list[tuple[str, Checkpoint]] = []
        problems: list[CheckpointProblem] = []
        for seq, path in self.files():
            try:
                found.append((str(path), _read(path, expected_seq=seq)))
            except CheckpointError as error:
                problems.append(CheckpointProblem(Fault.UNREADABLE, seq, str(path), str(error)))
        return found, problems


def _link_exclusively(temporary: Path, final: Path) -> None:
    try:
        os.link(temporary, final)
    except FileExistsError:
        raise
    except OSError:
        # A file system without hard links: a rename, after a check (not atomic against a second writer).
        if final.exists():
            raise FileExistsError(f"{final} exists") from None
        os.replace(temporary, final)


def _flush_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _read(path: Path, *, expected_seq: int | None = None) -> Checkpoint:
    source = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_CHECKPOINT_BYTES:
            raise CheckpointError(f"{source}: {size} bytes, more than a checkpoint's {MAX_CHECKPOINT_BYTES}")
        data = path.read_bytes()
    except OSError as error:
        raise CheckpointError(f"{source}: cannot read it: {error.strerror or error}") from None
    checkpoint = parse(data, source=source)
    if expected_seq is not None and checkpoint.seq != expected_seq:
        raise CheckpointError(f"{source}: field 'seq': {checkpoint.seq}, but the file's name says {expected_seq}")
    return checkpoint


def load_checkpoints(
    keys: Mapping[str, Ed25519PublicKey], *, directory: Path | None = None, file: Path | None = None
) -> tuple[list[Checkpoint], list[CheckpointProblem]]:
    """The checkpoints of ``directory`` (every one, and the series checked) or the one ``file`` whose
    signatures hold under ``keys``, and what is wrong with the others (and with the series)."""
    if (directory is None) == (file is None):
        raise ValueError("load_checkpoints: a directory or a file, not both")
    problems: list[CheckpointProblem] = []
    if file is not None:
        try:
            read = [(str(file), _read(file))]
        except CheckpointError as error:
            return [], [CheckpointProblem(Fault.UNREADABLE, None, str(file), str(error))]
    else:
        assert directory is not None
        read, problems = CheckpointDir(directory).read_all()
    valid: list[tuple[str, Checkpoint]] = []
    for source, checkpoint in read:
        why = checkpoint.signature_problem(keys)
        if why is None:
            valid.append((source, checkpoint))
        else:
            problems.append(CheckpointProblem(Fault.BAD_SIGNATURE, checkpoint.seq, source, why))
    if directory is not None:
        problems += check_series(valid)
    return [c for _, c in valid], sorted(problems, key=lambda p: (p.checkpoint or -1, p.kind.value))


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """The archiver's private key from its PEM file; ``KeyFileError`` naming the file and the reason."""
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as error:
        raise KeyFileError(f"signing key {path}: cannot read it: {error.strerror or error}") from None
    if mode & (stat.S_IROTH | stat.S_IWOTH):
        raise KeyFileError(f"signing key {path}: other users may read or write it (mode {mode & 0o777:o}): chmod 600")
    if mode & (stat.S_IRGRP | stat.S_IWGRP):
        log.warning("event=audit_signing_key_group_readable file=%s mode=%o", path, mode & 0o777)
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise KeyFileError(f"signing key {path}: not an unencrypted PEM private key ({error})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"signing key {path}: a {type(key).__name__}, not an Ed25519 key")
    return key


def load_public_key(spec: str) -> Ed25519PublicKey:
    """A public key from a PEM file, or given as its 64 hex digits; ``KeyFileError`` saying why not."""
    if _RAW_KEY.match(spec) and not Path(spec).exists():
        try:
            return Ed25519PublicKey.from_public_bytes(bytes.fromhex(spec))
        except ValueError as error:
            raise KeyFileError(f"public key {spec}: not an Ed25519 public key ({error})") from None
    path = Path(spec)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise KeyFileError(
            f"public key {spec}: neither a readable file ({error.strerror or error}) nor 64 hex digits"
        ) from None
    try:
        key = load_pem_public_key(data)
    except (ValueError, TypeError) as error:
        raise KeyFileError(f"public key {spec}: not a PEM public key ({error})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"public key {spec}: a {type(key).__name__}, not an Ed25519 key")
    return key


def trusted(keys: Iterable[Ed25519PublicKey]) -> dict[str, Ed25519PublicKey]:
    """Public keys by their key id, as checkpoints name them."""
    return {key_id(key): key for key in keys}


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)


def write_key_pair(private_path: Path, public_path: Path) -> Ed25519PublicKey:
    """A new Ed25519 key pair: the private key to ``private_path`` (created, mode 0600; an existing file
    is never replaced) and the public key to ``public_path``; returns the public key."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    public = key.public_key()
    _create(private_path, private, 0o600)
    try:
        _create(public_path, public_pem(public), 0o644)
    except BaseException:
        private_path.unlink(missing_ok=True)
        raise
    return public


def _create(path: Path, data: bytes, mode: int) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(descriptor, "wb") as out:
            os.fchmod(out.fileno(), mode)  # whatever the umask
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
