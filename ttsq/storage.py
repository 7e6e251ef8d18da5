"""Finished audio in S3-compatible object storage, reached by clients through presigned URLs.

Every failure is raised as :class:`~ttsq.errors.StorageUnavailable` (an outage: the step is retried)
or :class:`~ttsq.errors.StorageRefused` (a configuration problem: a worker whose own check meets it
too takes no work until fixed, ``workers.fitness``; else the job fails at once).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, BinaryIO, Final

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.client import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError
from opentelemetry.trace import SpanKind

from ttsq import tracing
from ttsq.errors import StorageRefused, StorageUnavailable
from ttsq.settings import S3Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import LifecycleRuleTypeDef, ObjectIdentifierTypeDef

_CONNECT_TIMEOUT_S = 5
_READ_TIMEOUT_S = 60
CHECK_TIMEOUT_S: Final = 3
"""Connect and read timeout of :meth:`ObjectStore.check`, tried once: a worker checks before it takes
its first message and every few seconds after, and a frozen store must not hold its start for the
minutes that a transfer's timeouts and retries allow."""
MULTIPART_THRESHOLD: Final = 16 * 1024 * 1024
"""Uploads above this go in 16 MiB parts: a long book is not one huge, all-or-nothing PUT."""
UPLOAD_PARTS_IN_MEMORY: Final = 2
"""Parts of one upload read into memory at once: one is sent while the next is read. s3transfer's
default (10 parts in memory, 10 threads) made a worker assembling a book 145 MiB larger."""
_TRANSFER = TransferConfig(
    multipart_threshold=MULTIPART_THRESHOLD,
    multipart_chunksize=MULTIPART_THRESHOLD,
    max_concurrency=UPLOAD_PARTS_IN_MEMORY,
)
_TRANSFER.max_in_memory_upload_chunks = UPLOAD_PARTS_IN_MEMORY  # s3transfer's own setting; boto3 has no alias


_RETRYABLE_CODES: Final = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling"})
"""S3 error codes that describe an overloaded or briefly failing store rather than a refusal."""


_CONFIGURATION_ERRORS: Final = (NoCredentialsError, PartialCredentialsError)
"""botocore's errors for credentials missing from this process's settings: no request was sent, and
none will succeed until the settings change, so they are refusals, not outages."""


def storage_error(action: str, error: BotoCoreError | ClientError) -> StorageRefused | StorageUnavailable:
    """Tell an outage (no connection, timeouts, 5xx, throttling) from a refusal (any other 4xx, or
    credentials missing here)."""
    if isinstance(error, _CONFIGURATION_ERRORS):
        return StorageRefused(f"object store not tried for {action}: {error}")
    if isinstance(error, BotoCoreError):
        return StorageUnavailable(f"object store unreachable during {action}: {error}")
    details = error.response.get("Error", {})
    code = str(details.get("Code", ""))
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    reason = f"{code or status}: {details.get('Message', error)}"
    if status >= 500 or status == 429 or code in _RETRYABLE_CODES:
        return StorageUnavailable(f"object store failed {action}: {reason}")
    return StorageRefused(f"object store refused {action}: {reason}")


def _client(
    settings: S3Settings,
    endpoint_url: str | None,
    timeouts_s: tuple[float, float] = (_CONNECT_TIMEOUT_S, _READ_TIMEOUT_S),
    attempts: int = 3,
) -> S3Client:
    """A client of the store; ``timeouts_s``: connect, read."""
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
            connect_timeout=timeouts_s[0],
            read_timeout=timeouts_s[1],
            # botocore retries one request (a throttled PUT, one part of a multipart upload, a reset
            # connection) within a second or two, which is far cheaper than redoing the whole step;
            # an outage that outlasts them is retried by Celery, with backoff, as the whole step.
            retries={"max_attempts": attempts, "mode": "standard"},
        ),
    )


PRESIGN_REUSE_FRACTION: Final = 0.01
"""A presigned URL is handed out again for up to this share of its lifetime (36 s of an hour), so
it is valid at least 99 % of ``presign_ttl_s`` when handed out. A job's URL is presigned for the
long poll's answer and again, moments later, for ``/audio``'s redirect; presigning is about 0.3 ms
of the API's interpreter (issue 38)."""
PRESIGN_REUSE_MAX_S: Final = 60.0
PRESIGNED_KEPT: Final = 4096
"""Most presigned URLs remembered; the least recently made go first."""


class RecentUrls:
    """Presigned URLs by key, each reused while younger than ``reuse_s``. Thread-safe: the API
    presigns on its event loop and in its threads."""

    def __init__(self, reuse_s: float, kept: int = PRESIGNED_KEPT) -> None:
        self._reuse_s = reuse_s
        self._kept = kept
        self._urls: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, now: float) -> str | None:
        with self._lock:
            entry = self._urls.get(key)
        if entry is None or now - entry[0] >= self._reuse_s:
            return None
        return entry[1]

    def put(self, key: str, url: str, now: float) -> None:
        with self._lock:
            self._urls[key] = (now, url)
            self._urls.move_to_end(key)
            while len(self._urls) > self._kept:
                self._urls.popitem(last=False)


STREAM_CHUNK_BYTES: Final = 256 * 1024
"""Bytes read from the store at a time when an object is passed on as a stream."""


@dataclass(frozen=True)
class StoredObject:
    """An object being read: its chunks (read once), its size in bytes and its content type."""

    chunks: Iterator[bytes]
    size: int
    content_type: str


class ObjectStore:
    """One bucket, used for writing results and presigning reads."""

    def __init__(self, settings: S3Settings) -> None:
        self.bucket = settings.bucket
        self._s3 = _client(settings, settings.endpoint_url)
        self._checker = _client(settings, settings.endpoint_url, (CHECK_TIMEOUT_S, CHECK_TIMEOUT_S), attempts=1)
        presign_endpoint = settings.public_endpoint_url or settings.endpoint_url
        self._presigner = _client(settings, presign_endpoint)
        self._presign_ttl_s = settings.presign_ttl_s
        self._presigned = RecentUrls(min(PRESIGN_REUSE_MAX_S, settings.presign_ttl_s * PRESIGN_REUSE_FRACTION))

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (development convenience)."""
        try:
            self._s3.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self._s3.create_bucket(Bucket=self.bucket)
            except (BotoCoreError, ClientError) as e:
                raise storage_error(f"creating bucket {self.bucket!r}", e) from e
        except BotoCoreError as e:
            raise storage_error(f"checking bucket {self.bucket!r}", e) from e

    def put(self, key: str, data: bytes, content_type: str) -> None:
        """Write an object whole: readers see either the old object or the new one, never part of it."""
        with self._span("PutObject", key, len(data)):
            self._put(key, data, content_type)

    def _put(self, key: str, data: bytes, content_type: str) -> None:
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        except (BotoCoreError, ClientError) as e:
            raise storage_error(f"the upload of {key}", e) from e

    def upload(self, key: str, stream: BinaryIO, content_type: str) -> None:
        """Upload from a seekable file object, in parts above :data:`MULTIPART_THRESHOLD`. S3
        publishes a multipart object only on completion, so readers never see a partial one. A
        smaller file goes in one ``put_object``: boto3's transfer manager starts a thread pool for
        every upload, a cost on each short job's path (issue 38)."""
        start = stream.tell()
        size = stream.seek(0, 2) - start
        stream.seek(start)
        with self._span("PutObject" if size < MULTIPART_THRESHOLD else "MultipartUpload", key, size):
            self._upload(key, stream, size, content_type)

    def _upload(self, key: str, stream: BinaryIO, size: int, content_type: str) -> None:
        try:
            if size < MULTIPART_THRESHOLD:
                self._s3.put_object(Bucket=self.bucket, Key=key, Body=stream, ContentType=content_type)
                return
            self._s3.upload_fileobj(stream, self.bucket, key, ExtraArgs={"ContentType": content_type}, Config=_TRANSFER)
        except (BotoCoreError, ClientError) as e:
            raise storage_error(f"the upload of {key}", e) from e

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None if there is no such key."""
        with self._span("GetObject", key):
            return self._get(key)

    def _get(self, key: str) -> bytes | None:
        try:
            return self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return None
            raise storage_error(f"the download of {key}", e) from e
        except BotoCoreError as e:
            raise storage_error(f"the download of {key}", e) from e

    def open(self, key: str) -> StoredObject | None:
        """The object as a stream of chunks with its size and type, or None if there is no such key:
        for passing a large object on without holding it whole."""
        try:
            answer = self._s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return None
            raise storage_error(f"the download of {key}", e) from e
        except BotoCoreError as e:
            raise storage_error(f"the download of {key}", e) from e
        body = answer["Body"]
        return StoredObject(body.iter_chunks(STREAM_CHUNK_BYTES), answer["ContentLength"], answer["ContentType"])

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (all pages)."""
        return [key for key, _ in self.list_dated(prefix)]

    def list_dated(self, prefix: str) -> list[tuple[str, datetime]]:
        """Every key under ``prefix`` with its last-modified time."""
        try:
            pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            return [(item["Key"], item["LastModified"]) for page in pages for item in page.get("Contents", [])]
        except (BotoCoreError, ClientError) as e:
            raise storage_error(f"a listing of {prefix}", e) from e

    def delete_many(self, keys: list[str]) -> None:
        """Delete keys (missing ones are fine), 1000 per request as S3 allows."""
        try:
            for start in range(0, len(keys), 1000):
                batch: list[ObjectIdentifierTypeDef] = [{"Key": k} for k in keys[start : start + 1000]]
                with self._span("DeleteObjects", batch[0]["Key"]):
                    self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        except (BotoCoreError, ClientError) as e:
            raise storage_error("a delete", e) from e

    def expire_prefix(self, rule_id: str, prefix: str, days: int) -> None:
        """Have the store itself delete objects under ``prefix`` ``days`` after they were written
        (a lifecycle rule), keeping the bucket's other rules. Raises a storage error if the store
        does not support lifecycle rules or refuses."""
        try:
            try:
                rules = self._s3.get_bucket_lifecycle_configuration(Bucket=self.bucket)["Rules"]
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") != "NoSuchLifecycleConfiguration":
                    raise
                rules = []
            kept = [rule for rule in rules if rule.get("ID") != rule_id]
            ours: LifecycleRuleTypeDef = {
                "ID": rule_id,
                "Filter": {"Prefix": prefix},
                "Status": "Enabled",
                "Expiration": {"Days": days},
            }
            self._s3.put_bucket_lifecycle_configuration(
                Bucket=self.bucket, LifecycleConfiguration={"Rules": [*kept, ours]}
            )
        except (BotoCoreError, ClientError) as e:
            raise storage_error(f"a lifecycle rule on {prefix}", e) from e

    def _span(self, method: str, key: str, size: int | None = None) -> AbstractContextManager[object]:
        """The call's span, named as OpenTelemetry names AWS SDK calls (``S3.PutObject``), under the
        step or request it serves (none outside one, ``ttsq.tracing.child_span``)."""
        attributes: dict[str, str | int] = {
            "rpc.system": "aws-api",
            "rpc.service": "S3",
            "rpc.method": method,
            "aws.s3.bucket": self.bucket,
            "aws.s3.key": key,
        }
        if size is not None:
            attributes["ttsq.bytes"] = size
        return tracing.child_span(f"S3.{method}", SpanKind.CLIENT, attributes)

    def presigned_get_url(self, key: str) -> str:
        """A URL that reads ``key`` for ``presign_ttl_s`` (at least 99 % of it: see
        :data:`PRESIGN_REUSE_FRACTION`)."""
        now = time.monotonic()
        url = self._presigned.get(key, now)
        if url is None:
            url = self._presigner.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=self._presign_ttl_s
            )
            self._presigned.put(key, url, now)
        return url

    def check(self) -> None:
        """Raise a storage error unless the bucket answers, within :data:`CHECK_TIMEOUT_S`."""
        try:
            self._checker.head_bucket(Bucket=self.bucket)
        except (BotoCoreError, ClientError) as e:
            raise storage_error(f"a check of bucket {self.bucket!r}", e) from e

    def check_writes(self, key: str) -> None:
        """Raise a storage error unless an empty object can be written at ``key``, within
        :data:`CHECK_TIMEOUT_S`: keys that may read the bucket but not write to it pass :meth:`check`."""
        try:
            self._checker.put_object(Bucket=self.bucket, Key=key, Body=b"")
        except (BotoCoreError, ClientError) as e:
            raise storage_error(f"a test write of {key!r}", e) from e
