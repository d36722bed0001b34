"""Alibaba Cloud ECS behind the Provider protocol (aliyun-python-sdk-core + aliyun-python-sdk-ecs).

The package has the same files as every cloud adapter:

* ``config``: ``NAME`` and ``AlibabaConfig``, what the settings load (GPUSCHED_ALIBABA_*).
* ``errors``: the SDK's exceptions as the project's ``ProviderError`` classes,
  ECS's error code and request id kept.
* ``client``: building one ``AcsClient`` per region with the SDK's retries off.
* ``wire``: our request as a RunInstancesRequest, ECS's instances as ours.
* ``prices``: on-demand and spot prices and stock from ECS's price and stock calls.
* ``adapter``: ``AlibabaProvider`` and ``from_config``, the entry ``providers.registry`` builds.

The SDK client is injected: ``AlibabaProvider`` takes a factory that builds one
``AcsClient`` per region; ``adapter.from_config`` builds the production one. Nothing
here reads the environment.

Choices, and why:

* Retries. The SDK's own are off (``auto_retry=False``, ``max_retry_time=0``):
  its retry of RunInstances after Throttling goes out without the ClientToken,
  a duplicate launch (docs/gpus-and-clouds.md). The adapter does not retry either:
  each call is made once and its failure translated. The lifecycle wraps calls
  in ``providers.retry.call_with_retry``, which backs off on what says it is
  retryable (Throttled, ProviderUnavailable, ResourceBusy); a second loop here
  would multiply the waits and hide throttling from that back-off.
  ``OperationConflict`` and ``LastTokenProcessing`` (another operation holds the
  instance or the token) are ``ResourceBusy``; a throttling answer's
  ``Retry-After`` rides on the error for that back-off to honour.
* Idempotency. Every RunInstances carries ``ClientToken = request.client_token``;
  ECS answers a repeated token with the instance it first made, and refuses it
  (``IdempotentParameterMismatch``) when any parameter differs. So nothing in
  the call depends on when it is made: ``AutoReleaseTime`` is counted from
  ``request.requested_at``, the intent's time stored with its token.
* Spot. ``SpotAsPriceGo``, or ``SpotWithPriceLimit`` when the request names a
  ``max_price`` (rounded down to the three decimals ECS takes, so the limit is
  never above what was asked). ``SpotDuration`` comes from the config, default
  0: no protected first hour. A protected hour is sold at a higher price, and
  the planner models reclaims as a constant hourly rate, which is what an
  unprotected instance has; jobs resume from checkpoints either way.
  ``SpotInterruptionBehavior=Terminate``: a reclaimed machine is released and
  the job moves on. Spot prices are asked with the same SpotDuration.
* Stop. ``StoppedMode=StopCharging``: compute billing stops (the disk still
  bills), except for types ECS cannot stop economically (local disks), which it
  stops in KeepCharging mode without an error: the listing reports those as
  ``stop_keeps_billing``. ECS can stop spot instances that way too (``Capability.spot_stop``); starting
  one again can fail for lack of stock, which reads as NoCapacity.
* Released instances. ECS forgets an instance the moment it is released:
  DescribeInstances no longer lists it and there is no "terminated" status.
  The adapter remembers the instances it released (and those it saw carrying a
  ``Recycling`` lock, ECS's notice of a spot reclaim) and reports them as
  terminated, the reclaimed ones ``preempted``, once the cloud stops listing
  them, for ``tombstone_seconds``. After a restart that memory is gone and the
  lifecycle's own rule for instances missing from the list takes over.
* Prices. On-demand from DescribePrice (the instance-type line, PostPaid, per
  hour), spot from DescribeSpotPriceHistory (latest point per zone; every page is
  read, the history being oldest first), stock from
  DescribeAvailableResource; a price the API will not give for a type falls
  back to the bundled catalog's, whose source says where it came from.
* Reserved capacity launches as plain PostPaid: ECS applies reserved-instance
  coupons to matching pay-as-you-go instances by itself. A listing cannot tell
  such an instance from on-demand, so it reports on-demand.
"""
