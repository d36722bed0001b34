"""Object storage for the on-instance agent: s3://, oss:// and cos:// through each cloud's Python SDK.

One small interface, ``ObjectStore`` (``base``), with one implementation per cloud (``s3``,
``oss``, ``cos``); ``choose.store_for(uri)`` picks by scheme. The agent signs with the
machine's role and nothing else: no key ever reaches the instance's user-data, this
package reads none from the environment itself, and the defaults are

* S3: boto3's default credential chain (on EC2: the instance profile, through IMDS);
* OSS: oss2's ``EcsRamRoleCredentialsProvider`` (the ECS instance's RAM role, read from
  the metadata service at 100.100.100.200), signing with V4 (``ProviderAuthV4``);
* COS: tencentcloud-sdk-python-common's ``CVMRoleCredential`` (the CVM's CAM role, read
  from metadata.tencentyun.com). cos-python-sdk-v5 takes such an object as
  ``CredentialInstance`` but then signs with its id and key and never sends its token
  (``x-cos-security-token`` comes from ``CosConfig(Token=...)`` alone; 1.9.44), which role
  credentials need; so ``CosRoleClient`` reads the three together and builds the client
  with ``SecretId``/``SecretKey``/``Token``, again whenever the role's credentials rotate.

Each store takes its SDK client (or bucket factory) as an argument, so tests inject one;
the SDKs are imported inside the default factories only, so the package imports without
them (the ``agent`` extra of gpusched's own wheel brings them). Large files go through the SDKs'
managed transfers: boto3's ``download_file``/``upload_file``, oss2's
``resumable_download``/``resumable_upload``, COS's ``download_file``/``upload_file``.

Errors: the SDKs' error types (botocore's client, credential and connection errors; oss2's
``OssError`` family; COS's ``CosServiceError``/``CosClientError``) do not leave a store.
Each becomes one of ``scheduler.errors``' existing classes (none is added): ``NotFound``
(no such object or bucket, or nothing under a prefix), ``AuthFailed`` (no role
credentials, or the role may not do this: 401/403),
``Throttled`` (SlowDown, 429), ``ProviderUnavailable`` (connection failures, timeouts,
5xx), ``InvalidRequest`` (another 4xx), ``ProviderError`` (anything else); ``UserError``
for what the job file or the bucket's contents got wrong (a malformed URI, a key that would
land outside the local folder). A local file that cannot be read or written raises the
usual ``OSError``. The messages carry the operation, the URI, the vendor's error code, the
HTTP status and the request id, never the vendor's message body: for a signature error OSS
and S3 echo the string they signed, which can hold the session token. For the same reason
the vendor exception is not chained onto ours, and the default factories set the SDKs'
loggers (which log signed requests, token included, at DEBUG) to WARNING.
"""
