"""S3 (moto locally): step outputs too large for a row, passed on intact."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from orchestrator.errors import StoreError

__all__ = ["Blobs"]


class Blobs:
    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3 = s3
        self.bucket = bucket

    def put(self, key: str, data: bytes) -> str:
        try:
            self.s3.put_object(
                Bucket=self.bucket, Key=key, Body=data, ContentType="application/json"
            )
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"blob {key}: write failed: {exc}") from exc
        return key

    def get(self, key: str) -> bytes:
        try:
            body: bytes = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"blob {key}: read failed: {exc}") from exc
        return body
