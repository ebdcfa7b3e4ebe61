"""Task outputs in an S3 bucket (``files.to: s3://bucket/prefix``), through ``aws``.

Agents never hold credentials for it: the daemon presigns a PUT URL per file of an
attempt (``<prefix>/.attempts/<attempt>/<path>``), checks what arrived, and commits the
attempt that counts by copying its objects under ``<prefix>/<task>/`` and deleting the
attempt's; every other attempt is deleted. A single PUT is atomic in S3: an object is
whole or absent, so an attempt cut short leaves no half object, only fewer of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from autoscaler.config.schema import Platform
from autoscaler.core.task_files import ATTEMPTS_DIR
from autoscaler.providers.aws import aws_errors, s3_client

PRESIGN_S = 3600
"""How long a presigned PUT URL stays valid."""


def s3_store(cfg: Platform, url: str, endpoint_url: str | None) -> S3Store:
    """The store of ``url``: in the region of the run's EC2 section if it has one, at
    ``endpoint_url`` or else that section's (moto in tests), else AWS's."""
    ec2 = cfg.ec2 or next((p for p in (cfg.providers or {}).values() if p.kind == "ec2"), None)
    endpoint = endpoint_url or getattr(ec2, "endpoint_url", None)
    return S3Store(url, getattr(ec2, "region", None), endpoint)


@dataclass
class S3Store:
    """One ``s3://bucket/prefix``."""

    url: str
    region: str | None = None
    endpoint_url: str | None = None
    _client: Any = field(default=None, init=False, repr=False)

    @property
    def bucket(self) -> str:
        return self.url[5:].split("/", 1)[0]

    @property
    def prefix(self) -> str:
        rest = self.url[5:].split("/", 1)
        return rest[1].strip("/") + "/" if len(rest) > 1 and rest[1].strip("/") else ""

    def client(self) -> Any:
        if self._client is None:
            self._client = s3_client(self.region, self.endpoint_url)
        return self._client

    def attempt_key(self, attempt: str, path: str = "") -> str:
        return f"{self.prefix}{ATTEMPTS_DIR}/{attempt}/{path}"

    def presign_put(self, attempt: str, path: str) -> str:
        with aws_errors("presigning an S3 PUT"):
            url: str = self.client().generate_presigned_url(
                "put_object",
                Params={"Bucket": self.bucket, "Key": self.attempt_key(attempt, path)},
                ExpiresIn=PRESIGN_S,
            )
        return url

    def sizes(self, prefix: str) -> dict[str, int]:
        """The objects under ``prefix``: key (after the prefix) -> bytes."""
        return {key[len(prefix) :]: size for key, size in self._list(prefix)}

    def _list(self, prefix: str) -> Iterator[tuple[str, int]]:
        with aws_errors("listing S3 objects"):
            pages = self.client().get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    yield obj["Key"], int(obj["Size"])

    def commit(self, attempt: str, task: int) -> None:
        """Copy the attempt's objects under the task's prefix, then delete them (again
        after a crash: the copies are idempotent)."""
        source = self.attempt_key(attempt)
        with aws_errors("committing task outputs in S3"):
            for path in self.sizes(source):
                self.client().copy_object(
                    Bucket=self.bucket,
                    Key=f"{self.prefix}{task}/{path}",
                    CopySource={"Bucket": self.bucket, "Key": source + path},
                )
        self.delete(source)

    def delete(self, prefix: str) -> None:
        """Delete every object under ``prefix``."""
        keys = [key for key, _ in self._list(prefix)]
        with aws_errors("deleting S3 objects"):
            for i in range(0, len(keys), 1000):
                objects = [{"Key": k} for k in keys[i : i + 1000]]
                self.client().delete_objects(Bucket=self.bucket, Delete={"Objects": objects})
