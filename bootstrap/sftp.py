"""Small files on a remote machine over SFTP: read one if it is there, write one whole
with its mode set before any byte (the run token is never readable by others)."""

from __future__ import annotations

import paramiko


def read_remote(sftp: paramiko.SFTPClient, path: str) -> bytes | None:
    """A small remote file's content, or None if it does not exist."""
    try:
        with sftp.open(path, "rb") as f:
            data: bytes = f.read()
            return data
    except FileNotFoundError:
        return None
    except OSError as exc:
        if getattr(exc, "errno", None) == 2:
            return None
        raise


def write_remote(sftp: paramiko.SFTPClient, path: str, data: bytes, mode: int) -> None:
    """Write a remote file atomically: a temporary file with its mode set first, renamed."""
    tmp = f"{path}.tmp"
    with sftp.open(tmp, "wb") as f:
        f.chmod(mode)  # before any byte is written: the token is never readable by others
        f.write(data)
    sftp.posix_rename(tmp, path)
