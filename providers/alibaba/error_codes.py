"""Every error code ECS documents for the calls the Alibaba adapter makes, and the class each one is.

This table is the adapter's mapping (``providers.alibaba.errors.translate_error`` reads it) and the
source of ``docs/error-codes.md`` (``scripts/error-codes`` writes that page from it; a test fails when
the page is stale). It imports no SDK, so the page can be written anywhere.

``DOCUMENTED`` lists, per ECS action, the codes its API reference page names (the English reference
of ECS API 2014-05-26: the pages of RunInstances, DescribeInstances, DeleteInstance, StopInstance,
StartInstances, DescribePrice, DescribeSpotPriceHistory and DescribeAvailableResource, and the common
error codes of every call). The adapter calls the plural DeleteInstances / StopInstances /
StartInstances, which answer the codes of those pages. ``ALSO_KNOWN`` holds codes the current ECS
pages name that the reference snapshot lacks, each with where it comes from.

A documented code not in any class set below is the request's own fault: ``InvalidRequest``.
"""

from __future__ import annotations

from collections.abc import Mapping

from providers.code_table import ClassSets, codes_of, listed_class
from scheduler.errors import (
    AuthFailed,
    BillingStopped,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    ResourceBusy,
    Throttled,
)

__all__ = ["ALSO_KNOWN", "CLASS_SETS", "DOCUMENTED", "all_codes", "classify", "documented_class"]

DOCUMENTED: Mapping[str, frozenset[str]] = {
    "RunInstances": frozenset({
        "Account.Arrearage", "CategoryNotSupported", "CategoryViolation",
        "ChargeTypeViolation.PostPaidDedicatedHost", "DedicatedHostType.Unmatched", "DefaultVswitch.Existed",
        "DeleteWithInstance.Conflict", "DependencyViolation.IoOptimized", "DependencyViolation.WindowsInstance",
        "DeploymentSet.NotFound", "Duplicate.TagKey", "Forbbiden", "Forbidden.RegionId",
        "Forbidden.RiskControl", "HOSTNAME_ILLEGAL", "ImageNotSubscribed", "ImageNotSupportCloudInit",
        "ImageNotSupportInstanceType", "ImageRemovedInMarket", "IncorrectDedicatedHostStatus",
        "IncorrectDefaultVpcStatus", "IncorrectInstanceStatus", "IncorrectRecycleBinStatus",
        "IncorrectVSwitchStatus", "IncorrectVpcStatus", "InstanceDiskCategoryLimitExceed",
        "InstanceDiskNumLimitExceed", "InstanceDiskNumber.LimitExceed", "InstanceType.Offline",
        "InsufficientBalance", "InternalError", "Invalid.PrivatePoolOptionsId",
        "InvalidAccountStatus.NotEnoughBalance", "InvalidAutoReleaseTime.Malformed",
        "InvalidAutoRenewPeriod.ValueNotSupported", "InvalidClientToken.ValueNotSupported",
        "InvalidClusterId.NotFound", "InvalidDataDevice.Malformed", "InvalidDataDiskCategory.ValueNotSupported",
        "InvalidDataDiskSize.ValueNotSupported", "InvalidDataDiskSnapshotId.NotFound",
        "InvalidDedicatedHostId.NotFound", "InvalidDedicatedHostStatus.NotSupport", "InvalidDeploymentOnHost",
        "InvalidDescription.Malformed", "InvalidDevice.InUse", "InvalidDisk.SystemDiskSize",
        "InvalidDiskCategory.Mismatch", "InvalidDiskCategory.NotSupported",
        "InvalidDiskCategory.ValueNotSupported", "InvalidDiskDescription.Malformed",
        "InvalidDiskIds.NotPortable", "InvalidDiskName.Malformed", "InvalidDiskSize.TooSmall",
        "InvalidHostName.Malformed", "InvalidHpcClusterId.Necessary", "InvalidHpcClusterId.NotFound",
        "InvalidHpcClusterId.Unnecessary", "InvalidHttpEndpoint.NotSupported",
        "InvalidHttpPutResponseHopLimit.NotSupported", "InvalidHttpTokens.NotSupported",
        "InvalidImageId.NotFound", "InvalidInnerIpAddress.Malformed", "InvalidInnerIpAddress.Unusable",
        "InvalidInstance.UnPaidOrder", "InvalidInstanceChargeType.NotFound",
        "InvalidInstanceChargeType.NotSupport", "InvalidInstanceName.Malformed",
        "InvalidInstanceType.ElasticNetworkInterfaceNotSupported", "InvalidInstanceType.NotSupported",
        "InvalidInstanceType.ValueNotSupported", "InvalidInstanceType.ValueUnauthorized",
        "InvalidInstanceType.ZoneNotSupported", "InvalidInternetChargeType.ValueNotSupported",
        "InvalidInternetMaxBandwidthIn.Malformed", "InvalidInternetMaxBandwidthOut.Malformed",
        "InvalidIoOptimize.ValueNotSupported", "InvalidIp.Address", "InvalidIp.IpAssigned",
        "InvalidIp.IpRepeated", "InvalidLaunchTemplate.NotFound", "InvalidLaunchTemplateVersion.NotFound",
        "InvalidMarketImage.NotFound", "InvalidMarketImageChargeType.NotSupport", "InvalidMaxAmount.Malformed",
        "InvalidMinAmount.Malformed", "InvalidNetworkType.Mismatch", "InvalidNetworkType.NotSupported",
        "InvalidNodeControllerId.Malformed", "InvalidOperation.ExceedInstanceTypeQueueNumber",
        "InvalidOperation.Ipv4CountExceeded", "InvalidOperation.Ipv6CountExceeded",
        "InvalidOperation.Ipv6NotSupport", "InvalidOperation.MaxEniQueueNumberExceeded",
        "InvalidOperation.ResourceManagedByCloudProduct",
        "InvalidOperation.VpcHasEnabledAdvancedNetworkFeature", "InvalidParam.Amount",
        "InvalidParam.NetworkInterface", "InvalidParam.Tenancy", "InvalidParameter",
        "InvalidParameter.Bandwidth", "InvalidParameter.Conflict", "InvalidParameter.CreditSpecification",
        "InvalidParameter.EncryptedIllegal", "InvalidParameter.EncryptedNotSupported",
        "InvalidParameter.InvalidEniQueueNumber", "InvalidParameter.KMSKeyId.CMKNotEnabled",
        "InvalidParameter.KMSKeyId.KMSUnauthorized", "InvalidParameter.KMSKeyId.NotFound",
        "InvalidParameter.Mismatch", "InvalidParameter.NotMatch", "InvalidParams.HostnameExceed",
        "InvalidParams.InstanceNameExceed", "InvalidPassword.Malformed", "InvalidPasswordParam.Mismatch",
        "InvalidPayMethod", "InvalidPeriod", "InvalidPeriod.ExceededDedicatedHost",
        "InvalidPeriodType.ValueNotSupported", "InvalidPrivateIpAddress", "InvalidPrivateIpAddress.Duplicated",
        "InvalidPrivateIpAddress.Malformed", "InvalidRamRole.NotEcsRole", "InvalidRamRole.NotFound",
        "InvalidRegion.NotSupport", "InvalidRelationResource.NotFound", "InvalidResourceGroup.NotFound",
        "InvalidResourceId.NotSupported", "InvalidSecurityGroup.NotInDefaultVpc", "InvalidSecurityGroupId",
        "InvalidSecurityGroupId.NotFound", "InvalidSnapshotId.BasedSnapshotTooOld",
        "InvalidSnapshotId.NotDataDiskSnapshot", "InvalidSnapshotId.NotFound", "InvalidSnapshotId.NotReady",
        "InvalidSpotAliUid", "InvalidSpotAuthorized", "InvalidSpotDuration", "InvalidSpotInterruptionBehavior",
        "InvalidSpotInterruptionBehavior.ClassicNetworkNotSupport",
        "InvalidSpotInterruptionBehavior.LocalDiskNotSupport", "InvalidSpotPrepaid", "InvalidSpotPriceLimit",
        "InvalidSpotPriceLimit.LowerThanPublicPrice", "InvalidSpotStrategy",
        "InvalidSystemDiskCategory.ValueNotSupported", "InvalidSystemDiskCategory.ValueUnauthorized",
        "InvalidSystemDiskSize.ImageNotSupportResize", "InvalidSystemDiskSize.LessThanImageSize",
        "InvalidSystemDiskSize.LessThanMinSize", "InvalidSystemDiskSize.ValueNotSupported",
        "InvalidTag.Mismatch", "InvalidTagCount", "InvalidTagKey.Malformed", "InvalidTagValue.Malformed",
        "InvalidUser.PassRoleForbidden", "InvalidUserData.Forbidden", "InvalidUserData.NotSupported",
        "InvalidUserData.SizeExceeded", "InvalidVSwitch.Ipv6NotTurnOn", "InvalidVSwitchId.IpInvalid",
        "InvalidVSwitchId.Necessary", "InvalidVSwitchId.NotExist", "InvalidVSwitchId.NotFound",
        "InvalidVpcZone.NotSupported", "InvalidZoneId.NotFound", "IoOptimized.NotSupported",
        "JoinedGroupLimitExceed", "MaxEniIpv6IpsCountExceeded", "MissingParameter",
        "MissingParameter.PrivatePoolOptionsId", "MissingParamter", "NodeControllerUnavailable",
        "OperationDenied", "OperationDenied.CreatingConflict", "OperationDenied.DiskTypeNotSupport",
        "OperationDenied.ImageNotValid", "OperationDenied.InconsistentNetwork",
        "OperationDenied.InvalidNetworkType", "OperationDenied.LocalDiskUnsupported", "OperationDenied.NoStock",
        "OperationDenied.NoVlan", "OperationDenied.QuotaExceed", "OperationDenied.ResourceControl",
        "OperationDenied.SnapshotNotAllowed", "OperationDenied.SnapshotNotValid",
        "OperationDenied.SnapshotParamsNotValid", "OperationDenied.ZoneNotAllowed",
        "OperationDenied.ZoneSystemCategoryNotMatch", "PaymentMethodNotFound", "QuotaExceed.AfterpayInstance",
        "QuotaExceed.BuyImage", "QuotaExceed.DeploymentSetInstanceQuotaFull", "QuotaExceed.ElasticQuota",
        "QuotaExceed.PortableCloudDisk", "QuotaExceed.PostPaidDisk", "QuotaExceed.Tags", "QuotaExceeded",
        "QuotaExceeded.PrivateIpAddress", "RealNameAuthenticationError", "RegionUnauthorized",
        "ResourceNotAvailable", "ResourcesNotInSameZone", "SecurityGroupInstanceLimitExceed",
        "SecurityRisk.3DVerification", "UserNotInTheWhiteList", "VpcNotFound", "Zone.NotOnSale", "Zone.NotOpen",
    }),
    "DescribeInstances": frozenset({
        "InvalidFilterKey.NotFound", "InvalidHpcClusterId.Creating", "InvalidHpcClusterId.NotFound",
        "InvalidInstanceChargeType.NotFound", "InvalidInternetChargeType.ValueNotSupported",
        "InvalidLockReason.NotFound", "InvalidNetworkType.NotFound", "InvalidStatus.NotFound",
        "InvalidTag.Mismatch", "InvalidTagCount",
    }),
    "DeleteInstance": frozenset({
        "ChargeTypeViolation", "DependencyViolation.RouteEntry", "DependencyViolation.SLBConfiguring",
        "IncorrectInstanceStatus", "IncorrectInstanceStatus.Initializing", "InstanceLockedForSecurity",
        "InternalError", "InvalidInstanceId.NotFound", "InvalidOperation.DeletionProtection",
        "InvalidOperation.EniLinked", "InvalidParameter",
    }),
    "StopInstance": frozenset({
        "DiskError", "IncorrectInstanceStatus", "InstanceExpiredOrInArrears", "InstanceLockedForSecurity",
        "InstanceType.ParameterMismatch", "InternalError", "InvalidInstanceId.NotFound",
        "InvalidInstanceId.NotSupport", "InvalidParameter.KMSKeyId.KMSUnauthorized",
    }),
    "StartInstances": frozenset({
        "IncorrectInstanceStatus", "InstanceNotReady", "InsufficientBalance", "InternalError",
        "InvalidInstanceId.NotFound", "OperationDenied.NoStock", "OperationDenied.SpotPriceLowerThanPublicPrice",
    }),
    "DescribeSpotPriceHistory": frozenset({
        "Abs.Abs.InvalidSpotInstanceUID", "Abs.InvalidAccount.NotFound", "Abs.IoOptimized.ValueNotSupported",
        "DependencyViolation.IoOptimized", "Forbbiden.SubUser", "Forbedden.NotSupportRAM",
        "InvalidInstanceID.Malformed", "InvalidInstanceType.ValueNotSupported", "InvalidParameter",
        "InvalidParams.EndTime", "InvalidParams.InstanceType", "InvalidParams.IoOptimized",
        "InvalidParams.NetworkType", "InvalidParams.OSType", "InvalidParams.Offset", "InvalidParams.PageSize",
        "InvalidParams.RegionId", "InvalidParams.StartTime", "InvalidParams.ZoneId", "InvalidSpotDuration",
        "InvalidUserType.NotSupported", "InvalidZoneId.NotFound", "MissingParameter", "UnsupportedParameter",
    }),
    "DescribePrice": frozenset({
        "DependencyViolation.IoOptimized", "EncryptedOption.Conflict", "Forbbiden", "ImageNotSubscribed",
        "ImageNotSupportInstanceType", "ImageRemovedInMarket", "InstanceDiskCategoryLimitExceed",
        "InstanceDiskNumLimitExceed", "InstanceDiskNumber.LimitExceed", "InstanceType.Offline", "InternalError",
        "Invalid.InstanceId.NotFound", "InvalidAction.Unauthorized", "InvalidAmount.Malformed",
        "InvalidChargeType.MarketImage", "InvalidDataDiskCategory.ValueNotSupported",
        "InvalidDataDiskSize.ValueNotSupported", "InvalidDiskCategory.Mismatch", "InvalidDiskCategory.Missing",
        "InvalidDiskCategory.NotSupported", "InvalidDiskCategory.ValueNotSupported", "InvalidDiskIds.NotFound",
        "InvalidDiskIds.NotPortable", "InvalidDiskSize.TooSmall", "InvalidImageId.NotFound",
        "InvalidInstanceChargeType.NotFound", "InvalidInstanceType.Missing",
        "InvalidInstanceType.ValueNotSupported", "InvalidInstanceType.ValueUnauthorized",
        "InvalidInternetChargeType.ValueNotSupported", "InvalidInternetMaxBandwidthOut.ValueNotSupported",
        "InvalidIoOptimizedValue.ValueNotSupported", "InvalidMarketImage.NotFound",
        "InvalidNetworkType.Mismatch", "InvalidNetworkType.ValueNotSupported", "InvalidParameter.Conflict",
        "InvalidParameter.ResourceOwnerAccount", "InvalidPeriod", "InvalidPriceUnit.ValueNotSupported",
        "InvalidResourceGroup.NotFound", "InvalidResourceType.ValueNotSupported", "InvalidSystemDisk.NotFound",
        "InvalidSystemDiskCategory.ValueNotSupported", "InvalidSystemDiskCategory.ValueUnauthorized",
        "InvalidSystemDiskSize.LessThanImageSize", "InvalidSystemDiskSize.LessThanMinSize",
        "InvalidSystemDiskSize.MoreThanMaxSize", "InvalidSystemDiskSize.ValueNotSupported",
        "IoOptimized.NotSupported", "OperationDenied", "PrePaidInstance.Expired", "PriceNotFound",
        "QuotaExceed.PortableCloudDisk", "RegionUnauthorized", "Throttling",
    }),
    "DescribeAvailableResource": frozenset({
        "Invalid.DestinationResource", "Invalid.InstanceChargeType", "Invalid.IoOptimized",
        "Invalid.NetworkCategory", "Invalid.NetworkType", "Invalid.Param", "Invalid.RegionId",
        "Invalid.ResourceType", "Invalid.SpotStrategy", "InvalidDedicatedHostId.NotFound", "InvalidParam.Cores",
        "InvalidParam.Memory", "InvalidParam.TypeAndCpuMem.Conflict", "InvalidRegionId.MalFormed",
        "InvalidResourceId.NotFound", "Unavailable.Regions",
    }),
    "common": frozenset({
        "ChargeTypeViolation", "Forbidden.AccessKeyDisabled", "Forbidden.NotSupportRAM", "Forbidden.RAM",
        "Forbidden.RiskControl", "Forbidden.SubUser", "Forbidden.Unauthorized", "IdempotentParameterMismatch",
        "IllegalTimestamp", "IncompleteSignature", "InsufficientBalance", "InternalError",
        "InvalidAccessKeyId.NotFound", "InvalidAccount.NotFound", "InvalidAction", "InvalidDiskId.NotFound",
        "InvalidIdempotenceParameter.Mismatch", "InvalidImageId.NotFound", "InvalidInstanceId.NotFound",
        "InvalidOwner", "InvalidOwnerAccount", "InvalidOwnerId", "InvalidParamater", "InvalidParameter",
        "InvalidParameter.IsNull", "InvalidParameter.OwnerAccount", "InvalidParameter.ResourceOwnerAccount",
        "InvalidRegionId.NotFound", "InvalidSecurityGroupId.NotFound", "InvalidSnapshotId.NotFound",
        "LastTokenProcessing", "MissingParameter", "OperationConflict", "RealNameAuthenticationError",
        "ServiceUnavailable", "ServiceUnavailable.RegionMaintaining", "SignatureNonceUsed", "Throttling",
        "UnknownError", "UnsupportedHTTPMethod", "UnsupportedParameter",
    }),
}

ALSO_KNOWN: Mapping[str, str] = {
    "InvalidZoneId.NotSupported": "the zone does not sell the type (named in issue 20; newer ECS pages)",
    "InvalidOperation.PublicIpAddressNoStock": "no public IP stock in the region (current RunInstances page)",
    "Throttling.User": "per-user flow control (current DescribePrice page)",
    "Throttling.Api": "per-API flow control (ECS throttling family)",
    "LackResource": "a capacity reservation has no room left (current StartInstance page)",
    "Invalid.PrivatePoolOptions.NoStock": "a private pool is used up (current StartInstance page)",
    "InvalidDedicatedHost.NotEnoughResource": "no dedicated host has room (current StartInstance page)",
    "InvalidInstanceIds.NotFound": "DescribeInstances / DeleteInstances with several ids, none found",
    "InvalidResourceType.NotSupported": "the type is not offered in the zone (older RunInstances answer)",
    "SignatureDoesNotMatch": "the request's signature is wrong (the gateway's answer to a bad secret)",
    "InvalidAccessKeySecret": "the SDK's name for SignatureDoesNotMatch with a matching string to sign",
    "InvalidTimeStamp.Expired": "the request's timestamp is more than 15 minutes off (the gateway)",
    "InvalidTimeStamp.Format": "the request's timestamp is malformed (the gateway)",
}

# Not here, try elsewhere: nothing to buy in that zone / of that type right now.
_NO_CAPACITY = frozenset({
    "OperationDenied.NoStock", "InstanceType.Offline", "Zone.NotOnSale", "Zone.NotOpen", "InvalidZoneId.NotSupported",
    "InvalidInstanceType.ZoneNotSupported", "OperationDenied.ZoneNotAllowed", "ResourceNotAvailable",
    "InvalidOperation.PublicIpAddressNoStock", "InvalidSpotPriceLimit.LowerThanPublicPrice",
    "OperationDenied.SpotPriceLowerThanPublicPrice", "InvalidResourceType.NotSupported", "LackResource",
    "Invalid.PrivatePoolOptions.NoStock", "InvalidDedicatedHost.NotEnoughResource",
})
_QUOTA = frozenset({
    "QuotaExceed.AfterpayInstance", "QuotaExceed.BuyImage", "QuotaExceed.DeploymentSetInstanceQuotaFull",
    "QuotaExceed.ElasticQuota", "QuotaExceed.PortableCloudDisk", "QuotaExceed.PostPaidDisk", "QuotaExceed.Tags",
    "QuotaExceeded", "QuotaExceeded.PrivateIpAddress", "OperationDenied.QuotaExceed",
    "SecurityGroupInstanceLimitExceed",
})
# The account cannot pay: nothing launches until someone does.
_BILLING = frozenset({
    "InsufficientBalance", "InvalidAccountStatus.NotEnoughBalance", "Account.Arrearage", "InstanceExpiredOrInArrears",
    "InvalidInstance.UnPaidOrder", "PaymentMethodNotFound", "InvalidPayMethod", "SecurityRisk.3DVerification",
})
_AUTH = frozenset({
    "InvalidAccessKeyId.NotFound", "InvalidAccessKeySecret", "SignatureDoesNotMatch", "IncompleteSignature",
    "Forbidden.AccessKeyDisabled", "Forbidden.NotSupportRAM", "Forbidden.RAM", "Forbidden.RiskControl",
    "Forbidden.SubUser", "Forbidden.Unauthorized", "Forbidden.RegionId", "Forbbiden", "Forbbiden.SubUser",
    "Forbedden.NotSupportRAM", "InvalidUser.PassRoleForbidden", "InvalidRamRole.NotEcsRole", "InvalidRamRole.NotFound",
    "InvalidAccount.NotFound", "Abs.InvalidAccount.NotFound", "RealNameAuthenticationError", "RegionUnauthorized",
    "InvalidAction.Unauthorized", "UserNotInTheWhiteList",
})
_THROTTLED = frozenset({"Throttling", "Throttling.User", "Throttling.Api"})
# Another operation holds the resource (or the token): the same call works once it ends.
_BUSY = frozenset({
    "OperationConflict", "LastTokenProcessing", "IncorrectInstanceStatus.Initializing",
    "DependencyViolation.SLBConfiguring", "OperationDenied.CreatingConflict", "InstanceNotReady",
})
_NOT_FOUND = frozenset({"InvalidInstanceId.NotFound", "InvalidInstanceIds.NotFound", "Invalid.InstanceId.NotFound"})
_UNAVAILABLE = frozenset({
    "InternalError", "ServiceUnavailable", "ServiceUnavailable.RegionMaintaining", "UnknownError",
    "NodeControllerUnavailable",
})

CLASS_SETS: ClassSets = (
    (NoCapacity, _NO_CAPACITY),
    (QuotaExceeded, _QUOTA),
    (BillingStopped, _BILLING),
    (AuthFailed, _AUTH),
    (Throttled, _THROTTLED),
    (ResourceBusy, _BUSY),
    (NotFound, _NOT_FOUND),
    (ProviderUnavailable, _UNAVAILABLE),
)


def all_codes() -> list[str]:
    """Every code in the table (documented and also known), sorted."""
    return codes_of(DOCUMENTED, ALSO_KNOWN)


def documented_class(code: str) -> type[ProviderError] | None:
    """The class of a code this table holds; None for a code it does not."""
    return listed_class(code, CLASS_SETS, DOCUMENTED, ALSO_KNOWN)


def classify(code: str, status: int | None = None) -> type[ProviderError]:
    """The class of any ECS (or SDK) code: the table's, else a rule for codes ECS may add."""
    known = documented_class(code)
    if known is not None:
        return known
    # Codes the table does not hold yet, by their family.
    if code.endswith((".NoStock", ".NotOnSale")) or "SoldOut" in code:
        return NoCapacity
    if code.startswith("QuotaExceed") or ".QuotaExceed" in code:
        return QuotaExceeded
    if code.startswith("Throttling") or status == 429:
        return Throttled
    if code.startswith(("InvalidAccessKeyId", "Forbidden", "InvalidSecurityToken", "NoPermission")) or code in (
        "SDK.InvalidCredential",
    ):
        return AuthFailed
    if code in ("SDK.HttpError", "SDK.ServerUnreachable", "SDK.UnknownServerError") or (
        status is not None and status >= 500
    ):
        return ProviderUnavailable
    return InvalidRequest
