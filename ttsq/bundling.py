"""Making a finished batch's bundles (:mod:`ttsq.batch_bundles`), in the service worker's finishing
task right after the manifest (``workers.batches``); never in the API.

Each bundle is written to a local temporary file, uploaded whole (``ObjectStore.upload``: S3
publishes a multipart object only on completion) under the attempt's own key beside the manifest,
its expiry scheduled with the batch's, and only then named in the batch record. Safe to repeat: a
settled bundle is never made again, and of two attempts that both made one (a service worker paused
past its claim, then resumed) the first to settle it wins; the other deletes its own object, never
the winner's. A bundle that cannot be made (no item succeeded; an item of an ``m4b`` did not; a
chapter that cannot be decoded) is settled ``failed`` with the reason; an outage of Redis or the
store is raised, and the sweeper sends the task again (the batch stays active until settled).
"""

from __future__ import annotations

import logging
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import av

from tts_core.mastering.m4b import ChapterAudio, write_m4b
from tts_core.text.file_names import safe_name
from ttsq.batch_bundles import DEFAULT_BOOK_TITLE, BundleKind, BundleState, BundleStatus, chapter_title
from ttsq.batches import BatchRecord, BatchStatus, BatchStore
from ttsq.constants import batch_bundle_key
from ttsq.errors import BatchNotFound, StorageRefused
from ttsq.job_record import JobError, JobRecord, JobResult, JobStatus
from ttsq.job_store import JobStore
from ttsq.storage import ObjectStore

log = logging.getLogger(__name__)

SIDE_FILES: Final = (("marks_key", ".marks.json"), ("subtitles_key", ".vtt"), ("srt_key", ".srt"))
"""A chapter's other files in the zip, named as ``ttsq narrate`` names them beside its audio."""


class BundleImpossible(Exception):
    """This bundle cannot be made from this batch; ``error`` is what its record says."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.error = JobError(code=code, message=message)


@dataclass(frozen=True)
class Chapter:
    """One item of the batch as a chapter of the book: its place, job id and record (None: expired)."""

    index: int
    job_id: str
    job: JobRecord | None

    @property
    def result(self) -> JobResult | None:
        """Its stored audio, if it succeeded (and was not purged)."""
        job = self.job
        return job.result if job is not None and job.status is JobStatus.SUCCEEDED else None

    @property
    def title(self) -> str:
        return chapter_title(self.index, self.job.title if self.job is not None else None)

    @property
    def extension(self) -> str:
        return self.job.output.format.extension if self.job is not None else "audio"

    def stem(self, digits: int) -> str:
        """Its file names without the suffix: ``NN-title``, numbered from 1."""
        return safe_name(self.index + 1, self.title, digits)

    def describe(self) -> str:
        """``items[2] (ref) is failed``: how a refusal names it."""
        if self.job is None:
            return f"items[{self.index}] has expired"
        purged = " (purged)" if self.job.status is JobStatus.SUCCEEDED else ""
        return f"items[{self.index}] ({self.job.ref or self.index}) is {self.job.status.value}{purged}"


def make_bundles(
    batch_id: str, batches: BatchStore, jobs: JobStore, objects: ObjectStore, attempt: str
) -> BatchRecord | None:
    """Make every bundle the finished batch asked for and has not settled, one after another (a
    ready zip is shown while the m4b is made). Returns the record if this call settled any, None if
    there was nothing to do (no bundle pending, or the batch not finished yet)."""
    record = batches.get(batch_id)
    pending = [kind for kind, state in record.bundles.items() if state.status is BundleStatus.PENDING]
    if record.manifest_key is None or not pending:
        return None
    chapters = [Chapter(i, job_id, job) for i, (job_id, job) in enumerate(batches.all_items(batch_id, jobs))]
    for kind in pending:
        with tempfile.TemporaryDirectory(prefix="ttsq-bundle-") as folder:
            key = batch_bundle_key(record.tenant, batch_id, attempt, kind.file_name)
            state = _made(kind, record, chapters, objects, key, Path(folder), batches)
        record = _settle(batch_id, kind, state, batches, objects)
        log.info("batch %s: bundle %s %s", batch_id, kind.value, record.bundles[kind].status.value)
    return record


def _made(
    kind: BundleKind,
    record: BatchRecord,
    chapters: list[Chapter],
    objects: ObjectStore,
    key: str,
    folder: Path,
    batches: BatchStore,
) -> BundleState:
    """The bundle made and uploaded as ``key`` (``ready``), or why it cannot be (``failed``)."""
    path = folder / kind.file_name
    try:
        included = MAKERS[kind](record, chapters, objects, path)
        batches.schedule_object_expiry(record, key)  # before the upload: a crash between them leaves nothing kept
        with path.open("rb") as stream:
            objects.upload(key, stream, kind.content_type)
    except BundleImpossible as e:
        log.warning("batch %s: no %s bundle: %s", record.id, kind.value, e)
        return BundleState(status=BundleStatus.FAILED, error=e.error)
    except StorageRefused as e:  # the configuration, not this batch: retrying would meet it again
        return BundleState(status=BundleStatus.FAILED, error=JobError(code=e.code, message=str(e)))
    return BundleState(status=BundleStatus.READY, key=key, bytes=path.stat().st_size, chapters=included)


def _settle(
    batch_id: str, kind: BundleKind, state: BundleState, batches: BatchStore, objects: ObjectStore
) -> BatchRecord:
    """Write the bundle's state if it is still pending; an attempt that finds it settled already
    deletes its own object and answers with the winner's record."""

    def changes(current: BatchRecord) -> dict[str, Any]:
        if current.bundles[kind].status is not BundleStatus.PENDING:
            return {}
        return {"bundles": {**current.bundles, kind: state}}

    updated = batches.update(batch_id, (BatchStatus.COMPLETED, BatchStatus.CANCELED), changes)
    if updated is None:
        raise BatchNotFound(batch_id)  # not finished: make_bundles only runs on a finished batch
    if state.key is not None and updated.bundles[kind].key != state.key:
        objects.delete_many([state.key])
    return updated


def _zip(record: BatchRecord, chapters: list[Chapter], objects: ObjectStore, path: Path) -> int:
    """Every succeeded item's audio and side files, ``NN-title.<ext>``; the items in it."""
    digits = max(2, len(str(len(chapters))))
    included = 0
    with zipfile.ZipFile(path, "w", allowZip64=True) as archive:
        for chapter in chapters:
            if (result := chapter.result) is None:
                continue
            stem = chapter.stem(digits)
            audio = f"{stem}.{chapter.extension}"
            if not _add(archive, objects, result.key, audio, zipfile.ZIP_STORED):  # compressed already
                continue  # its object expired or was purged meanwhile: as if it had not succeeded
            included += 1
            for field, suffix in SIDE_FILES:
                side: str | None = getattr(result, field)
                if side is not None:
                    _add(archive, objects, side, stem + suffix, zipfile.ZIP_DEFLATED)
    if not included:
        raise BundleImpossible("no_item_succeeded", "no item of the batch has audio to put in a zip")
    return included


def _add(archive: zipfile.ZipFile, objects: ObjectStore, key: str, name: str, compression: int) -> bool:
    """Stream the object into the archive as ``name``; False if it is gone."""
    stored = objects.open(key)
    if stored is None:
        return False
    info = zipfile.ZipInfo(name)
    info.compress_type = compression
    info.file_size = stored.size  # tells zipfile whether the entry needs ZIP64 before it is written
    with archive.open(info, "w") as entry:
        for chunk in stored.chunks:
            entry.write(chunk)
    return True


def _m4b(record: BatchRecord, chapters: list[Chapter], objects: ObjectStore, path: Path) -> int:
    """One AAC audiobook with a chapter mark per item; every item must have succeeded."""
    audio: list[ChapterAudio] = []
    for chapter in chapters:
        if (result := chapter.result) is None:
            raise BundleImpossible("item_not_succeeded", f"{chapter.describe()}: an m4b needs every item")
        local = path.parent / f"{chapter.index:06d}.{chapter.extension}"
        if not _download(objects, result.key, local):
            raise BundleImpossible("item_not_succeeded", f"items[{chapter.index}]: its audio is gone (purged)")
        audio.append(ChapterAudio(local, chapter.title))
    try:
        write_m4b(audio, path, record.title or DEFAULT_BOOK_TITLE)
    except (ValueError, av.FFmpegError) as e:
        raise BundleImpossible("chapter_unreadable", f"the m4b could not be made: {e}") from e
    return len(audio)


def _download(objects: ObjectStore, key: str, destination: Path) -> bool:
    stored = objects.open(key)
    if stored is None:
        return False
    with destination.open("wb") as file:
        for chunk in stored.chunks:
            file.write(chunk)
    return True


MAKERS: Final[dict[BundleKind, Callable[[BatchRecord, list[Chapter], ObjectStore, Path], int]]] = {
    BundleKind.ZIP: _zip,
    BundleKind.M4B: _m4b,
}
"""How each kind of bundle is made into a local file; each returns the items it holds."""
