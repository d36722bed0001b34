"""Tencent Cloud CVM behind the Provider protocol, over tencentcloud-sdk-python (API 2017-03-12).

The package has the same files as every cloud adapter:

* ``config``: ``NAME`` and ``TencentConfig``, what the settings load (GPUSCHED_TENCENT_*).
* ``errors``: the SDK's exception as the project's ``ProviderError`` classes,
  CVM's error code and request id kept.
* ``client``: building one ``CvmClient`` per region with the SDK's retries off.
* ``wire``: our request as RunInstances parameters, CVM's instances as ours.
* ``prices``: live offers (prices, stock, GPU count) from DescribeZoneInstanceConfigInfos.
* ``adapter``: ``TencentProvider`` and ``from_config``, the entry ``providers.registry`` builds.

The SDK client is injected: ``TencentProvider`` takes a factory that builds one
``CvmClient`` per region; ``adapter.from_config`` builds the real one from a
``TencentConfig``. Nothing here reads the environment.

Choices, and why:

* Retries are ours, never the SDK's. Its ``StandardRetryer`` keeps a stale error
  and raises it after a later success (docs/gpus-and-clouds.md), so a client with a
  retryer is refused. The adapter does not retry either: the lifecycle wraps
  every call in ``providers.retry.call_with_retry``, and a RunInstances retried
  there carries the same ClientToken, so a lost answer never makes a second
  machine.
* Answers are read by the adapter, not by the SDK's typed methods: the SDK takes
  an error body for a success unless ``Content-Type`` is exactly
  ``application/json`` (a sold-out launch would read as zero instances, a failed
  listing as an empty one). The SDK still signs and sends; ``Retry-After`` is kept.
* TerminateInstances of an instance already destroyed, in the recycle bin
  (SHUTDOWN), on its way there, or never created (LAUNCH_FAILED) is success
  (``error_codes.GONE_ON_TERMINATE``).
* ``launch`` is RunInstances (ClientToken = the request's token, tags on the
  instance at creation) followed by one DescribeInstances of the new id, so it
  returns the cloud's own pending instance. A token CVM has seen before answers
  with the instance it first made; if that instance is not what this request
  asks for, the adapter raises InvalidRequest (CVM documents no error for it).
* A destroyed instance. CVM's documented states end at TERMINATING; a destroyed
  instance is SHUTDOWN until it leaves the list. SHUTDOWN (and LAUNCH_FAILED,
  and a TERMINATED should one appear) map to ``terminated``: none of them runs
  or bills compute again unless an owner renews it by hand.
* Spot reclaims. CVM names a reclaim only inside the instance (metadata
  ``spot/termination-time``). Through the API, a SPOTPAID instance that is
  destroyed (TERMINATING or SHUTDOWN) while its ``LatestOperation`` is not
  ``TerminateInstances`` was destroyed by the cloud, not by its owner: that is
  reported as ``preempted``. No advance notice is visible from the API.
* Spot instances cannot be stopped here (no ``Capability.spot_stop``): CVM's
  stop-charging mode is for pay-as-you-go instances, and a stopped spot
  instance is not promised its capacity back. ``stop`` refuses them before calling the cloud.
* Prices: ``DescribeZoneInstanceConfigInfos`` (pay-as-you-go and SPOTPAID in one
  call per region) gives price, SELL / SOLD_OUT and the GPU count; the paid
  price is ``UnitPriceDiscount``. The currency is the account's site: USD on the
  international site, CNY on the China site; the API does not say which, so the
  config must (``currency``, ``site``, or an ``*.intl.*`` endpoint; never a
  default). The GPU model is not
  in the API: it comes from the bundled catalog's row for the instance type, or
  from the instance family. With the config's ``live_prices`` off, the bundled
  catalog serves as it is (and the capability set lacks ``Capability.live_prices``).
"""
