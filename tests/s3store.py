"""A real S3 endpoint on loopback (moto's server) holding a copy of the fixture tree, for the
tests that read log directories through ``s3://`` URIs.

The objects are uploaded with boto3 (an independent client); kafkalog only ever reads them,
through pyarrow's S3 filesystem. Credentials and the endpoint travel in the URI itself, so
Spark's Python workers (separate processes) resolve the same store without any environment.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUCKET = "kafkalog-fixtures"
PREFIX = "fixtures"


@dataclass
class S3Store:
    endpoint: str
    client: Any

    def uri(self, relative: str | Path = "") -> str:
        """``s3://`` URI of ``relative`` (a path under the fixture tree) in this store."""
        key = f"{PREFIX}/{relative}".rstrip("/").removesuffix("/.")
        return (
            f"s3://testing:testing@{BUCKET}/{key}"
            f"?endpoint_override={self.endpoint}&region=us-east-1"
        )

    def listing(self) -> dict[str, tuple[int, str, Any]]:
        """key -> (size, ETag, LastModified) of every object: what a reader must not change."""
        out: dict[str, tuple[int, str, Any]] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = (obj["Size"], obj["ETag"], obj["LastModified"])
        return out


def serve(fixtures: Path) -> Iterator[S3Store]:
    """Start the server, upload ``fixtures`` under ``fixtures/``, yield the store, stop it."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_bucket(Bucket=BUCKET)

        def upload(path: Path) -> None:
            key = f"{PREFIX}/{path.relative_to(fixtures).as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())

        # some 480 small objects, each a round trip mostly spent waiting (5-6 s one after the
        # other, 2 s eight at a time, the same CPU): boto3's clients are thread-safe
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(upload, sorted(p for p in fixtures.rglob("*") if p.is_file())))
        yield S3Store(endpoint, client)
    finally:
        server.stop()
