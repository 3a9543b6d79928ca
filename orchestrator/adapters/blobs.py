"""S3 (moto locally): step outputs too large for a row, passed on intact."""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.aws import translate_errors

__all__ = ["Blobs"]


class Blobs:
    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3 = s3
        self.bucket = bucket

    def put(self, key: str, data: bytes) -> str:
        with translate_errors(f"blob {key}: write"):
            self.s3.put_object(
                Bucket=self.bucket, Key=key, Body=data, ContentType="application/json"
            )
        return key

    def url(self, key: str, expires: int = 900) -> str:
        """A presigned GET URL of a blob: a function fetches it without credentials."""
        with translate_errors(f"blob {key}: presign"):
            out: str = self.s3.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires)
        return out

    def get(self, key: str) -> bytes:
        with translate_errors(f"blob {key}: read"):
            body: bytes = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body
