"""Huawei Cloud ECS behind the Provider protocol, over huaweicloudsdkecs + huaweicloudsdkcore (ECS API v1).

The package has the same files as every cloud adapter:

* ``config``: ``NAME`` and ``HuaweiConfig``, what the settings load (GPUSCHED_HUAWEI_*, and the
  SDK's own HUAWEICLOUD_SDK_AK / _SK / _PROJECT_ID).
* ``error_codes``: every code ECS's and the API gateway's references document for the calls
  made here, and its class (docs/error-codes.md is written from it).
* ``errors``: the SDK's exceptions and failed jobs as the project's ``ProviderError`` classes,
  the vendor's code and request id kept, with the fix each needs.
* ``client``: one ``EcsClient`` per region, AK/SK-signed, with the SDK's retries off and its
  throttling answers kept whole (code and ``Retry-After``).
* ``wire``: our request as a CreatePostPaidServers body, ECS's servers as ours, the intent id.
* ``prices``: offers from the bundled catalog, with the stock ECS's flavor list reports.
* ``adapter``: ``HuaweiProvider`` and ``from_config``, the entry ``providers.registry`` builds.

The SDK client is injected: ``HuaweiProvider`` takes a factory that builds one ``EcsClient``
per region; ``adapter.from_config`` builds the real one. Nothing here reads the environment.

Choices, and why:

* Idempotent create. CreatePostPaidServers has no ClientToken parameter; Huawei's ECS takes an
  ``X-Client-Token`` header instead, a UUID it dedupes for a while (a reuse with other
  parameters is ``Ecs.0122``, a token that is not a UUID ``Ecs.0123``). The lifecycle's client
  token (``gs-<job>-a<attempt>``, written ahead with the intent) becomes the intent id
  ``uuid5(client token)``: that UUID is the header, and a server tag (``gpusched:intent``).
  ``launch`` first looks the intent up by that tag, and creates only when no server carries
  it; so a launch retried after a lost answer, a crash or hours later never makes a second
  server, even after Huawei has forgotten the header.
* Creation is asynchronous: the answer is a job id and the server ids. ``launch`` asks the job
  once (``GET /v1/{project_id}/jobs/{job_id}``): a failed job (a sold-out flavor fails there,
  ``Ecs.0319``) becomes NoCapacity and the like; a job that names no server yet is asked again
  on the injected clock, up to ``job_wait_seconds``, then ProviderUnavailable (safe to retry).
  A job that fails after ``launch`` returned rolls its server back: the server leaves the
  listing and the lifecycle's rule for vanished machines takes over.
* Retries are ours, never the SDK's: ``HttpConfig.retry_times`` must be 0 (a client that would
  retry is refused), and the adapter makes every call once and translates its failure. The SDK's
  session would still turn an HTTP 429 into a bare "429" error (urllib3's status retry, body and
  headers gone); ``client`` lets the answer through, so ``APIGW.0308`` and its ``Retry-After``
  reach ``providers.retry``. ECS documents flow control (``Common.0024``) with HTTP 202, which the
  SDK takes for a success: an answer whose body is an error is that error, never an empty list.
* A create job that fails made nothing (ECS rolls it back) and is a refusal whatever its code:
  a system error inside the job reads as NoCapacity, because re-issuing the launch with the same
  ``X-Client-Token`` would be answered with the same failed job.
* Deleted servers. ECS stops listing a server once it is deleted, and shows no "deleted" state
  to an ordinary account. The adapter remembers the servers it listed and reports one that is
  gone as terminated for ``tombstone_seconds``; a spot server that went without a delete from
  gpusched was released by Huawei and is reported ``preempted``. Huawei says nothing about a
  spot release through the ECS API beforehand, so no advance notice is reported. After a
  restart that memory is empty and the lifecycle's rule for missing machines takes over.
* Spot (``extendparam.marketType = "spot"``, with ``spotPrice`` when the request names a
  ``max_price``; without one Huawei bids the on-demand price). No ``spot_duration_hours``: a
  protected block is sold at another price and the planner models reclaims as a constant
  rate. Spot servers are not stopped (no ``Capability.spot_stop``): ``stop`` refuses them.
* Stop is stop-charging: a stopped pay-per-use GPU server is not billed for vCPUs, memory or
  GPUs (its disks still are), Huawei's rule for the GPU flavors.
* Prices are the bundled catalog's (``prices``): the ECS API has no price call and Huawei
  publishes no spot price through any API. Stock comes live from ListFlavors.
"""
