"""3 · The only code that talks to AWS or to functions: the boto3 client factory and its
error translation (aws.py), SQS (queue.py and the typed messages), S3 (blobs.py), the
HTTP invoker of user functions, and the DynamoDB store (store/). `botocore.ClientError`
never leaves this package."""
