"""``ttsq lexicons``: store, read, list and delete your pronunciation lexicons through the API (the
key in ``TTSQ_API_KEY`` is the tenant whose lexicons they are)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from narration.client import ClientError, TTSQClient
from ttsq.settings import get_settings

CONTENT_TYPES = {".pls": "application/pls+xml", ".xml": "application/pls+xml", ".json": "application/json"}
"""A lexicon file's suffix to the content type it is sent as."""


def _client(api_url: str | None) -> TTSQClient:
    settings = get_settings()
    key = settings.api_key.get_secret_value() if settings.api_key else None
    return TTSQClient(api_url or settings.api_url, key)


api_url_option = click.option("--api-url", default=None, help="Default: the api_url setting (TTSQ_API_URL).")


@click.group()
def lexicons() -> None:
    """Pronunciation lexicons (W3C PLS or JSON) that jobs name with "lexicons"."""


@lexicons.command("put")
@click.argument("name")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@api_url_option
def put(name: str, file: Path, api_url: str | None) -> None:
    """Store FILE (.pls/.xml: PLS, .json: ttsq's JSON form) as lexicon NAME, replacing it whole."""
    content_type = CONTENT_TYPES.get(file.suffix.lower())
    if content_type is None:
        raise click.ClickException(f"{file.name}: name a .pls, .xml or .json file")
    try:
        with _client(api_url) as client:
            summary = client.put_lexicon(name, file.read_bytes(), content_type)
    except ClientError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"{name}: version {summary['version']}, {summary['entries']} entries ({summary['language']})")


@lexicons.command("get")
@click.argument("name")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Default: standard output.")
@api_url_option
def get(name: str, output: Path | None, api_url: str | None) -> None:
    """Write lexicon NAME's document, exactly as stored."""
    try:
        with _client(api_url) as client:
            document = client.get_lexicon(name)
    except ClientError as e:
        raise click.ClickException(str(e)) from e
    if output is None:
        sys.stdout.buffer.write(document)
    else:
        output.write_bytes(document)


@lexicons.command("list")
@click.option("--json", "as_json", is_flag=True, help="The API's JSON.")
@api_url_option
def list_command(as_json: bool, api_url: str | None) -> None:
    """Your lexicons: name, language, entries, version."""
    try:
        with _client(api_url) as client:
            found = client.list_lexicons()
    except ClientError as e:
        raise click.ClickException(str(e)) from e
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for lexicon in found:
        click.echo(
            f"{lexicon['name']}\t{lexicon['language']}\t{lexicon['entries']} entries\tversion {lexicon['version']}"
        )


@lexicons.command("delete")
@click.argument("name")
@api_url_option
def delete(name: str, api_url: str | None) -> None:
    """Delete lexicon NAME (jobs submitted before keep speaking with it)."""
    try:
        with _client(api_url) as client:
            client.delete_lexicon(name)
    except ClientError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"{name}: deleted")
