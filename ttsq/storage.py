"""Finished audio in S3-compatible object storage, reached by clients through presigned URLs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
from botocore.client import Config
from botocore.exceptions import BotoCoreError, ClientError

from ttsq.settings import S3Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_CONNECT_TIMEOUT_S = 5
_READ_TIMEOUT_S = 60


class StorageError(Exception):
    """The object store refused or could not be reached."""


def _client(settings: S3Settings, endpoint_url: str | None) -> S3Client:
    secret = settings.secret_access_key.get_secret_value() if settings.secret_access_key else None
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=settings.region,
        aws_access_key_id=settings.access_key_id,
        aws_secret_access_key=secret,
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": settings.addressing_style},
            connect_timeout=_CONNECT_TIMEOUT_S,
            read_timeout=_READ_TIMEOUT_S,
            retries={"max_attempts": 3, "mode": "standard"},
        ),
    )


class ObjectStore:
    """One bucket, used for writing results and presigning reads."""

    def __init__(self, settings: S3Settings) -> None:
        self.bucket = settings.bucket
        self._s3 = _client(settings, settings.endpoint_url)
        presign_endpoint = settings.public_endpoint_url or settings.endpoint_url
        self._presigner = _client(settings, presign_endpoint)
        self._presign_ttl_s = settings.presign_ttl_s

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (development convenience)."""
        try:
            self._s3.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self._s3.create_bucket(Bucket=self.bucket)
            except (BotoCoreError, ClientError) as e:
                raise StorageError(f"cannot create bucket {self.bucket!r}: {e}") from e
        except BotoCoreError as e:
            raise StorageError(f"object store unreachable: {e}") from e

    def put(self, key: str, data: bytes, content_type: str) -> None:
        """Write an object whole: readers see either the old object or the new one, never part of it."""
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        except (BotoCoreError, ClientError) as e:
            raise StorageError(f"upload of {key} failed: {e}") from e

    def presigned_get_url(self, key: str) -> str:
        return self._presigner.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=self._presign_ttl_s
        )

    def check(self) -> None:
        """Raise :class:`StorageError` unless the bucket answers."""
        try:
            self._s3.head_bucket(Bucket=self.bucket)
        except (BotoCoreError, ClientError) as e:
            raise StorageError(f"bucket {self.bucket!r} not reachable: {e}") from e
