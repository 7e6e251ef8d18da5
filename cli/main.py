"""The ``ttsq`` command: run the stack or its parts, and speak text through a running API.

``ttsq say`` and ``ttsq api`` never load the inference runtime: only worker commands do, when
they start workers. What runs the stack (``cli.dev``, ``cli.workerpool``: the embedded services,
boto3, the worker launcher) is imported by its own commands only: at the top, it was a second of
every ``ttsq narrate`` or ``ttsq say`` start. ``ttsq keys``, ``ttsq lexicons`` and ``ttsq usage`` load
when named.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Final

import click
from rich.console import Console

from cli.commands import DEFAULT_WYOMING_URI, SERVICE_WORKER_THREADS, VOICEVOX_PORT, beat_argv, webhook_worker_argv
from narration.client import ClientError, TTSQClient
from narration.narrate import EXIT_FAILED, EXIT_INTERRUPTED, Narration, narrate
from narration.outputs import book_webvtt, failure_table, resume_command
from narration.planning import MARKS, NarrateOptions
from narration.state import write_atomic
from tts_core.base.device import cuda_device_count
from tts_core.base.errors import DeviceUnavailable, InvalidBook
from tts_core.marks.speech_marks import marks_from_json
from tts_core.mastering.formats import DEFAULT_FORMAT, AudioFormat
from ttsq.constants import WYOMING_PORT
from ttsq.settings import DEFAULT_WORKER_METRICS_PORT, get_settings
from ttsq.webhook_signing import parse_secrets

FORMATS = tuple(f.value for f in AudioFormat)
FORMAT_BY_SUFFIX = {f.extension: f.value for f in reversed(AudioFormat)}
"""A file name's suffix to the format it names (``.wav`` is plain WAV, ``.ulaw`` raw μ-law)."""


class _Commands(click.Group):
    """The command group, with the administrators' commands (``keys``, ``lexicons``, ``usage``: the
    stores and the broker's client) imported only when one of them is named or the commands are listed."""

    LAZY: Final = {"keys": "cli.keys", "lexicons": "cli.lexicons", "usage": "cli.usage"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.LAZY:
            command = getattr(importlib.import_module(self.LAZY[cmd_name]), cmd_name)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Commands)
def main() -> None:
    """ttsq: a job-based text-to-speech service."""


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".ttsq"), show_default=True)
@click.option("--api-port", type=int, default=8000, show_default=True)
@click.option("--flower-port", type=int, default=5555, show_default=True)
@click.option(
    "--redis-port",
    type=int,
    default=6379,
    show_default=True,
    help="Ignored if TTSQ_REDIS_URL is set (environment or .env).",
)
@click.option(
    "--s3-port",
    type=int,
    default=8333,
    show_default=True,
    help="Ignored if TTSQ_S3__ENDPOINT_URL is set (environment or .env).",
)
@click.option(
    "--worker-metrics-port",
    type=int,
    default=DEFAULT_WORKER_METRICS_PORT,
    show_default=True,
    help="The worker's /metrics, /healthz and /readyz.",
)
@click.option("--wyoming-port", type=int, default=WYOMING_PORT, show_default=True, help="The Wyoming server.")
@click.option(
    "--voicevox-port",
    type=int,
    default=VOICEVOX_PORT,
    show_default=True,
    help="The VOICEVOX-compatible API (VOICEVOX ENGINE's own port).",
)
def dev(
    data_dir: Path,
    api_port: int,
    flower_port: int,
    redis_port: int,
    s3_port: int,
    worker_metrics_port: int,
    wyoming_port: int,
    voicevox_port: int,
) -> None:
    """Start Redis, SeaweedFS S3, a worker, the service worker, beat, the API, the Wyoming server and
    Flower in the foreground; start again any of them that dies (Ctrl-C stops all)."""
    from cli.dev import DevError, DevPorts, run_dev

    try:
        ports = DevPorts(api_port, flower_port, redis_port, s3_port, worker_metrics_port, wyoming_port, voicevox_port)
        code = run_dev(data_dir.resolve(), ports)
    except (DevError, DeviceUnavailable, TimeoutError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e
    sys.exit(code)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--voicevox-port",
    type=int,
    default=None,
    help="Also serve the VOICEVOX-compatible API at the root of this port (VOICEVOX's own: 50021); "
    "it is always under /voicevox on --port.",
)
@click.option("--no-access-log", is_flag=True, help="Log no line per request.")
def api(host: str, port: int, voicevox_port: int | None, no_access_log: bool) -> None:
    """Run the HTTP API (uvicorn)."""
    from cli.api_server import serve_api

    serve_api(host, port, voicevox_port, access_log=not no_access_log)


@main.command()
@click.option(
    "--uri",
    default=DEFAULT_WYOMING_URI,
    show_default=True,
    help="tcp://HOST:PORT or unix://PATH. No authentication: bind to a private address (docs/WYOMING.md).",
)
def wyoming(uri: str) -> None:
    """Run the Wyoming TTS server (Home Assistant): each request a job, speaking as the tenant of
    TTSQ_WYOMING_API_KEY (anonymous if unset)."""
    from api.wyoming.server import run
    from ttsq.errors import ServiceError

    try:
        run(get_settings(), uri)
    except (ServiceError, ValueError) as e:
        raise click.ClickException(str(e)) from e
    except KeyboardInterrupt:
        pass


@main.command()
@click.option(
    "--gpus", default=None, help="'all' or indexes like 0,2: one worker process per GPU, each started again if it dies."
)
@click.option("--cpu", is_flag=True, help="One CPU worker with as many inference threads as cores.")
@click.option("--concurrency", type=int, default=None, help="Task threads per process (default: max_batch + 1).")
@click.option("--name", default="worker@%h", show_default=True, help="Celery node name (not with --gpus/--cpu).")
@click.option("--loglevel", default="INFO", show_default=True)
def worker(gpus: str | None, cpu: bool, concurrency: int | None, name: str, loglevel: str) -> None:
    """Run Celery workers on the threads pool; each process loads its model once, before taking jobs."""
    from cli.workerpool import GpuSelectionError, cpu_worker, default_worker, gpu_workers, parse_gpus, run_workers

    if gpus and cpu:
        raise click.UsageError("choose --gpus or --cpu, not both")
    settings = get_settings()
    if concurrency is not None:
        worker_settings = settings.worker.model_copy(update={"concurrency": concurrency})
        settings = settings.model_copy(update={"worker": worker_settings})
    try:
        if gpus:
            specs = gpu_workers(settings, parse_gpus(gpus, cuda_device_count()), loglevel)
        else:
            specs = [cpu_worker(settings, loglevel) if cpu else default_worker(settings, name, loglevel)]
    except GpuSelectionError as e:
        raise click.UsageError(str(e)) from e
    except DeviceUnavailable as e:
        raise click.ClickException(str(e)) from e
    if len(specs) == 1:
        os.execve(specs[0].argv[0], specs[0].argv, {**os.environ, **specs[0].env})
    sys.exit(run_workers(specs))


@main.command("webhook-worker")
@click.option(
    "--concurrency", type=int, default=SERVICE_WORKER_THREADS, show_default=True, help="Threads for maintenance tasks."
)
@click.option("--name", default="webhooks@%h", show_default=True, help="Celery node name.")
@click.option("--loglevel", default="INFO", show_default=True)
def webhook_worker(concurrency: int, name: str, loglevel: str) -> None:
    """Run the service worker: webhook deliveries (TTSQ_WEBHOOK_CONCURRENCY at once, on one event
    loop) and the maintenance tasks (queue 'maintenance'); loads no model."""
    argv = webhook_worker_argv(concurrency, name, loglevel)
    os.execv(argv[0], argv)


@main.command()
@click.option(
    "--schedule",
    type=click.Path(path_type=Path),
    default=Path(".ttsq/beat-schedule"),
    show_default=True,
    help="Where beat remembers when each task last ran.",
)
@click.option("--loglevel", default="INFO", show_default=True)
def beat(schedule: Path, loglevel: str) -> None:
    """Send the periodic tasks (sweeper, cleanup) to the service worker; run one per deployment."""
    schedule.parent.mkdir(parents=True, exist_ok=True)
    argv = beat_argv(schedule, loglevel)
    os.execv(argv[0], argv)


@main.command("webhook-listen")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=9000, show_default=True)
@click.option("--secret", default=None, help="whsec_… (default: TTSQ_WEBHOOK_SECRET; ttsq dev keeps one in .ttsq/).")
def webhook_listen(host: str, port: int, secret: str | None) -> None:
    """Receive webhook events locally: verify each signature and print one line per event."""
    from cli.webhook_listen import WebhookListener

    configured = get_settings().webhook_secret
    value = secret or (configured.get_secret_value() if configured else None)
    if value is None:
        raise click.UsageError("no secret: pass --secret or set TTSQ_WEBHOOK_SECRET")
    try:
        keys = parse_secrets(value)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    listener = WebhookListener(keys, host, port, echo=lambda line: click.echo(line))
    click.echo(f"listening on {listener.url} (Ctrl-C stops)")
    try:
        listener.serve_forever()
    except KeyboardInterrupt:
        listener.stop()


@main.command()
@click.argument("text")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Where to write the audio.")
@click.option("--voice", default=None, help="Voice id (see GET /v1/voices).")
@click.option("--format", "audio_format", type=click.Choice(FORMATS), default=None, help="Default: from -o's suffix.")
@click.option("--speed", type=float, default=None)
@click.option("--api-url", default=None, help="Default: the api_url setting (TTSQ_API_URL), http://127.0.0.1:8000.")
@click.option("--timeout", "timeout_s", type=float, default=600, show_default=True)
def say(
    text: str,
    output: Path,
    voice: str | None,
    audio_format: str | None,
    speed: float | None,
    api_url: str | None,
    timeout_s: float,
) -> None:
    """Synthesise TEXT through a running API, wait for it, and download the audio."""
    suffix = output.suffix.lstrip(".").lower()
    chosen = audio_format or FORMAT_BY_SUFFIX.get(suffix, DEFAULT_FORMAT.value)
    try:
        settings = get_settings()
        key = settings.api_key.get_secret_value() if settings.api_key else None
        with TTSQClient(api_url or settings.api_url, key) as client:
            job = client.submit(text, voice=voice, format=chosen, speed=speed)
            done = client.wait(job["id"], timeout_s)
            size = client.download(job["id"], output)
    except (ClientError, OSError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"{output}: {size} bytes, {done['result']['duration_s']:.2f}s of {chosen} (job {job['id']})")


@main.command("narrate")
@click.argument("book", type=click.Path(path_type=Path))
@click.option(
    "--out", "folder", type=click.Path(path_type=Path), required=True, metavar="DIR", help="Folder for the audio files."
)
@click.option("--voice", default=None, help="Voice id (see GET /v1/voices); default: the server's.")
@click.option("--format", "audio_format", type=click.Choice(FORMATS), default="mp3", show_default=True)
@click.option("--speed", type=float, default=None)
@click.option(
    "--by",
    type=click.Choice(["chapter", "file"]),
    default="chapter",
    show_default=True,
    help="chapter: one audio file per chapter; file: the whole book as one job and one file.",
)
@click.option(
    "--marks",
    type=click.Choice(list(MARKS)),
    default="sentence",
    show_default=True,
    help="Timing marks per chapter, downloaded as NN-title.vtt, .srt and .marks.json: sentence, "
    "word (sentence and word marks), viseme (sentence, word, phoneme and viseme marks, "
    "for lip-sync), or none (audio only).",
)
@click.option(
    "--loudness",
    default=None,
    metavar="PRESET|LUFS",
    help="Level every chapter to one target: podcast (-16 LUFS), broadcast (-23 LUFS), audiobook (ACX: "
    "RMS -20 dBFS, peaks under -3 dBFS), or an integrated loudness in LUFS (-30 to -10); default: the voice's own.",
)
@click.option(
    "--lexicon",
    "lexicon_names",
    multiple=True,
    metavar="NAME",
    help="One of your lexicons (ttsq lexicons put) to apply to every chapter; repeat for up to 5, first match wins.",
)
@click.option("--api-url", default=None, help="Default: the api_url setting (TTSQ_API_URL), http://127.0.0.1:8000.")
@click.option(
    "--m4b",
    is_flag=True,
    help="Also write DIR/<book>.m4b: one AAC audiobook with chapter marks (and DIR/<book>.vtt with marks).",
)
def narrate_command(
    book: Path,
    folder: Path,
    voice: str | None,
    audio_format: str,
    speed: float | None,
    by: str,
    marks: str,
    loudness: str | None,
    lexicon_names: tuple[str, ...],
    api_url: str | None,
    m4b: bool,
) -> None:
    """Narrate BOOK (.txt, .md, .epub, or a folder of .txt/.md) through a running API as one batch.

    Each chapter is downloaded to DIR/NN-title.<format> as soon as it is done, with its subtitles
    (NN-title.vtt, NN-title.srt) and marks (NN-title.marks.json) unless --marks none;
    DIR/manifest.json and DIR/<book>.m3u list them. Rerunning the same command reuses finished files
    whose SHA-256 is the one they were downloaded with, and the same batch; Ctrl-C leaves the batch
    running and prints the command that resumes.
    """
    options = NarrateOptions(
        voice=voice,
        format=audio_format,
        speed=speed,
        by=by,
        marks=marks,
        loudness=loudness,
        lexicons=lexicon_names,
    )
    console = Console(stderr=True)
    settings = get_settings()
    key = settings.api_key.get_secret_value() if settings.api_key else None
    try:
        with TTSQClient(api_url or settings.api_url, key) as client:
            narration = narrate(book, folder, options, client, console)
    except KeyboardInterrupt:
        console.print("Interrupted: the batch keeps running on the server; this resumes it:")
        click.echo(resume_command(book, folder, options, api_url, m4b))
        sys.exit(EXIT_INTERRUPTED)
    except (InvalidBook, ClientError, OSError) as e:
        raise click.ClickException(str(e)) from e
    _finish(narration, folder, m4b, console)


def _finish(narration: Narration, folder: Path, m4b: bool, console: Console) -> None:
    """The summary, the audiobook if asked for and every chapter has audio, and the exit code."""
    done = narration.succeeded
    audio_s = sum(o.duration_s or 0 for o in done)
    click.echo(f"{folder}: {len(done)} of {len(narration.planned)} chapters, {audio_s / 60:.1f} min of audio")
    if narration.failed:
        console.print(failure_table(narration.failed))
        sys.exit(EXIT_FAILED)
    if m4b:
        import av  # PyAV (bundled FFmpeg): loaded only when an audiobook is asked for

        from tts_core.mastering.m4b import ChapterAudio, write_m4b

        path = folder / f"{narration.book_name}.m4b"
        chapters = [ChapterAudio(folder / o.file, o.title) for o in done]
        try:
            book = write_m4b(chapters, path, narration.book.title)
        except (OSError, ValueError, av.FFmpegError) as e:
            raise click.ClickException(f"cannot write {path}: {e}") from e
        click.echo(f"{path}: {book.duration_s / 60:.1f} min, {len(chapters)} chapters")
        if all("marks" in o.side for o in done):
            _write_book_subtitles(narration, folder, book.spans_ms)


def _write_book_subtitles(narration: Narration, folder: Path, spans_ms: list[tuple[int, int]]) -> None:
    """``DIR/<book>.vtt``: the chapters' subtitles placed where each chapter is in the ``.m4b``."""
    path = folder / f"{narration.book_name}.vtt"
    try:
        marks = [marks_from_json(json.loads((folder / o.side["marks"]).read_text())) for o in narration.succeeded]
        write_atomic(path, book_webvtt(zip(marks, spans_ms, strict=True)))
    except (OSError, ValueError) as e:
        raise click.ClickException(f"cannot write {path}: {e}") from e
    click.echo(f"{path}: subtitles of the audiobook")


if __name__ == "__main__":  # python -m cli.main: this checkout's code, whatever `ttsq` is installed from
    main()
