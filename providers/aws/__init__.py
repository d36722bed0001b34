"""The AWS EC2 adapter: ``providers.base.Provider`` over boto3, one EC2 client per region.

The package has the same files as every cloud adapter:

* ``config``: ``NAME`` and ``AwsConfig``, what the settings load (GPUSCHED_AWS_*).
* ``errors``: botocore's exceptions as the project's ``ProviderError`` classes,
  AWS's error code and request id kept.
* ``client``: building a boto3 EC2 client with botocore's retries off.
* ``wire``: our request as RunInstances parameters, EC2's instances as ours.
* ``prices``: spot prices from DescribeSpotPriceHistory.
* ``adapter``: ``AwsProvider`` and ``from_config``, the entry ``providers.registry`` builds.

The clients are injected (a mapping or a factory; ``client.make_ec2_client``
builds real ones), so tests point them at a local moto server and production at
AWS; nothing here reads the environment. botocore's own retries are switched off
(``total_max_attempts: 1``): retries are ours (``providers.retry``), made safe by
the client token on every launch. The adapter itself never retries.

AWS specifics worth knowing:

* Spot is a one-time request that terminates on interruption: such an instance
  cannot be stopped, so ``stop`` refuses it with ``InvalidRequest`` before
  asking AWS (which would refuse too), and the capability set lacks
  ``Capability.spot_stop``.
* A reclaimed spot instance lingers as ``terminated`` (about an hour) with the
  state reason ``Server.SpotInstanceTermination``: listings keep terminated
  instances visible so the lifecycle sees the reclaim.
* The two-minute interruption notice is published on the instance (IMDS) and
  through EventBridge, not by DescribeInstances, so ``interruption_notice_at``
  stays None here.
* Reserved capacity is a billing construct on AWS: a reserved launch is an
  on-demand launch that the reservation's discount covers.
"""
