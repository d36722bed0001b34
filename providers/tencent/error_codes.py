"""Every error code CVM documents for the calls the Tencent adapter makes, and the class each one is.

This table is the adapter's mapping (``providers.tencent.errors.translate_error`` reads it) and the
source of ``docs/error-codes.md`` (``scripts/error-codes`` writes that page from it; a test fails when
the page is stale). It imports no SDK.

``DOCUMENTED`` lists, per CVM action (API 2017-03-12), the codes Tencent's API reference names for it
(the per-action error lists Tencent publishes with each SDK), and ``common`` the common error codes of
every Tencent Cloud API 3.0 call. ``ALSO_KNOWN`` holds codes the adapter meets that those lists lack,
each with where it comes from. A documented code in no class set below is the request's own fault:
``InvalidRequest``.
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

__all__ = ["ALSO_KNOWN", "CLASS_SETS", "DOCUMENTED", "GONE_ON_TERMINATE", "all_codes", "classify",
           "documented_class"]

DOCUMENTED: Mapping[str, frozenset[str]] = {
    "RunInstances": frozenset({
        "AccountQualificationRestrictions", "AuthFailure.CamRoleNameAuthenticateFailed",
        "FailedOperation.DisasterRecoverGroupNotFound", "FailedOperation.IllegalTagKey",
        "FailedOperation.IllegalTagValue", "FailedOperation.InquiryPriceFailed",
        "FailedOperation.NoAvailableIpAddressCountInSubnet", "FailedOperation.PromotionalRegionRestriction",
        "FailedOperation.SecurityGroupActionFailed", "FailedOperation.SnapshotSizeLargerThanDataSize",
        "FailedOperation.SnapshotSizeLessThanDataSize", "FailedOperation.TagKeyReserved",
        "InstancesQuotaLimitExceeded", "InternalError.TradeUnknownError", "InvalidAccount.InsufficientBalance",
        "InvalidClientToken.TooLong", "InvalidHostId.Malformed", "InvalidHostId.NotFound",
        "InvalidImageId.Malformed", "InvalidImageId.NotFound", "InvalidInstance.NotSupported",
        "InvalidInstanceName.TooLong", "InvalidInstanceType.Malformed", "InvalidKeyPairId.Malformed",
        "InvalidParameter.CdcNotSupported", "InvalidParameter.EdgeZoneMissInternetAccessible",
        "InvalidParameter.HostIdCustomizedInstanceTypeNotSupport",
        "InvalidParameter.HostIdInstanceTypeNotSupport",
        "InvalidParameter.HostIdStandardInstanceTypeNotSupport", "InvalidParameter.HostIdStatusNotSupport",
        "InvalidParameter.InstanceImageNotSupport", "InvalidParameter.InstanceTypeSupportedHostNotFound",
        "InvalidParameter.InternetAccessibleNotSupported", "InvalidParameter.InvalidIpFormat",
        "InvalidParameter.LackCoreCountOrThreadPerCore", "InvalidParameter.OnlySupportForEdgeZone",
        "InvalidParameter.ParameterConflict", "InvalidParameter.SnapshotNotFound",
        "InvalidParameter.SpecialParameterForSpecialAccount", "InvalidParameterCombination",
        "InvalidParameterValue", "InvalidParameterValue.BandwidthPackageIdMalformed",
        "InvalidParameterValue.BandwidthPackageIdNotFound", "InvalidParameterValue.BandwidthPackageIspNotMatch",
        "InvalidParameterValue.BandwidthPackageZoneNotMatch", "InvalidParameterValue.CamRoleNameMalformed",
        "InvalidParameterValue.ChcHostsNotFound", "InvalidParameterValue.CloudSsdDataDiskSizeTooSmall",
        "InvalidParameterValue.CoreCountValue", "InvalidParameterValue.DedicatedClusterNotSupportedChargeType",
        "InvalidParameterValue.DedicatedResourcePackIdsNotFound",
        "InvalidParameterValue.DedicatedResourcePackNotValid",
        "InvalidParameterValue.DedicatedResourcePackTenancyMismatch", "InvalidParameterValue.Duplicate",
        "InvalidParameterValue.DuplicateTags", "InvalidParameterValue.ElasticNetworkNotExist",
        "InvalidParameterValue.ElasticNetworkVpcSubnetMismatch", "InvalidParameterValue.ExternalIpQuotaLimited",
        "InvalidParameterValue.HpcClusterIdZoneIdNotMatch", "InvalidParameterValue.IPAddressMalformed",
        "InvalidParameterValue.IllegalHostName", "InvalidParameterValue.IncorrectFormat",
        "InvalidParameterValue.InstanceTypeNotFound",
        "InvalidParameterValue.InstanceTypeNotSupportElasticNetworks",
        "InvalidParameterValue.InstanceTypeNotSupportHpcCluster",
        "InvalidParameterValue.InstanceTypeRequiredHpcCluster", "InvalidParameterValue.InsufficientOffering",
        "InvalidParameterValue.InsufficientPrice", "InvalidParameterValue.InvalidAppIdFormat",
        "InvalidParameterValue.InvalidImageForGivenInstanceType", "InvalidParameterValue.InvalidImageFormat",
        "InvalidParameterValue.InvalidImageId", "InvalidParameterValue.InvalidImageOsName",
        "InvalidParameterValue.InvalidImageState", "InvalidParameterValue.InvalidInstanceTypePeriodicContract",
        "InvalidParameterValue.InvalidIpFormat", "InvalidParameterValue.InvalidNetworkInterfaceId",
        "InvalidParameterValue.InvalidParameterMinCount", "InvalidParameterValue.InvalidPassword",
        "InvalidParameterValue.InvalidTimeFormat", "InvalidParameterValue.InvalidUserDataFormat",
        "InvalidParameterValue.InvalidVpcIdSubnetIdNotFound", "InvalidParameterValue.IspNotSupportForEdgeZone",
        "InvalidParameterValue.IspValueRepeated", "InvalidParameterValue.KeyPairNotFound",
        "InvalidParameterValue.LaunchTemplateIdMalformed", "InvalidParameterValue.LaunchTemplateIdNotExisted",
        "InvalidParameterValue.LaunchTemplateNotFound", "InvalidParameterValue.LaunchTemplateVersion",
        "InvalidParameterValue.LimitExceeded", "InvalidParameterValue.MustDhcpEnabledVpc",
        "InvalidParameterValue.MustEnabledIsRdma", "InvalidParameterValue.NotCdcSubnet",
        "InvalidParameterValue.Range", "InvalidParameterValue.SnapshotIdMalformed",
        "InvalidParameterValue.SubnetIdMalformed", "InvalidParameterValue.SubnetIdZoneIdNotMatch",
        "InvalidParameterValue.SubnetNotExist", "InvalidParameterValue.TagKeyNotFound",
        "InvalidParameterValue.TagQuotaLimitExceeded", "InvalidParameterValue.ThreadPerCoreValue",
        "InvalidParameterValue.TooLarge", "InvalidParameterValue.VpcIdMalformed",
        "InvalidParameterValue.VpcIdNotExist", "InvalidParameterValue.VpcIdSubnetIdNotMatch",
        "InvalidParameterValue.VpcIdZoneIdNotMatch", "InvalidParameterValue.VpcNotSupportIpv6Address",
        "InvalidParameterValue.ZoneNotSupported", "InvalidPassword", "InvalidPeriod", "InvalidPermission",
        "InvalidProjectId.NotFound", "InvalidSecurityGroupId.NotFound", "InvalidZone.MismatchRegion",
        "LimitExceeded.CvmInstanceQuota", "LimitExceeded.CvmsVifsPerSecGroupLimitExceeded",
        "LimitExceeded.DisasterRecoverGroup", "LimitExceeded.IPv6AddressNum",
        "LimitExceeded.InstanceEniNumLimit", "LimitExceeded.InstanceQuota", "LimitExceeded.PrepayQuota",
        "LimitExceeded.PrepayUnderwriteQuota", "LimitExceeded.SingleUSGQuota", "LimitExceeded.SpotQuota",
        "LimitExceeded.UserSpotQuota", "LimitExceeded.VpcSubnetNum", "MissingParameter",
        "MissingParameter.DPDKInstanceTypeRequiredVPC", "MissingParameter.MonitorService",
        "OperationDenied.AccountNotSupported", "OperationDenied.ChcInstallCloudImageWithoutDeployNetwork",
        "OperationDenied.NotBandwidthShiftUpUserApplyEdgeZoneEip",
        "ResourceInsufficient.AvailabilityZoneSoldOut", "ResourceInsufficient.CidrBlock",
        "ResourceInsufficient.CloudDiskSoldOut", "ResourceInsufficient.CloudDiskUnavailable",
        "ResourceInsufficient.DisasterRecoverGroupCvmQuota", "ResourceInsufficient.InsufficientOfferingMinimum",
        "ResourceInsufficient.SpecifiedInstanceType", "ResourceNotFound.HpcCluster",
        "ResourceNotFound.KeyPairNotFound", "ResourceNotFound.NoDefaultCbs",
        "ResourceNotFound.NoDefaultCbsWithReason", "ResourceUnavailable.InstanceType",
        "ResourcesSoldOut.EipInsufficient", "ResourcesSoldOut.SpecifiedInstanceType",
        "UnauthorizedOperation.InvalidToken", "UnsupportedOperation",
        "UnsupportedOperation.BandwidthPackageIdNotSupported", "UnsupportedOperation.HibernationOsVersion",
        "UnsupportedOperation.InstanceStateIsolating",
        "UnsupportedOperation.InstanceTypeNotSupportConfidentiality",
        "UnsupportedOperation.InstanceTypeNotSupportGridLicence",
        "UnsupportedOperation.InstanceTypeNotSupportJumboFrame",
        "UnsupportedOperation.InstancesEnableJumboWithoutReboot", "UnsupportedOperation.InvalidDisk",
        "UnsupportedOperation.InvalidRegionDiskEncrypt", "UnsupportedOperation.KeyPairUnsupportedWindows",
        "UnsupportedOperation.MinCountUnsupportedChargeType", "UnsupportedOperation.MinCountUnsupportedRegion",
        "UnsupportedOperation.NoInstanceTypeSupportSpot",
        "UnsupportedOperation.NotSupportImportInstancesActionTimer",
        "UnsupportedOperation.OnlyForPrepaidAccount",
        "UnsupportedOperation.PeriodicContractNotSupportManualRenew",
        "UnsupportedOperation.RawLocalDiskInsReinstalltoQcow2", "UnsupportedOperation.SpotUnsupportedRegion",
        "UnsupportedOperation.UnderwritingInstanceTypeOnlySupportAutoRenew",
        "UnsupportedOperation.UnsupportedInternationalUser", "VpcAddrNotInSubNet", "VpcIpIsUsed",
    }),
    "TerminateInstances": frozenset({
        "FailedOperation.InvalidInstanceApplicationRole", "FailedOperation.InvalidInstanceApplicationRoleEmr",
        "FailedOperation.Unreturnable", "InternalError.TradeUnknownError", "InternalServerError",
        "InvalidAccount.UnpaidOrder", "InvalidInstance.NotSupported", "InvalidInstanceId.Malformed",
        "InvalidInstanceId.NotFound", "InvalidInstanceNotSupportedPrepaidInstance", "InvalidParameterValue",
        "InvalidParameterValue.InstanceIdMalformed", "InvalidParameterValue.InvalidAppIdFormat",
        "InvalidParameterValue.LimitExceeded", "InvalidParameterValue.NotSupported",
        "LimitExceeded.UserReturnQuota", "MissingParameter", "MutexOperation.TaskRunning",
        "OperationDenied.InstanceOperationInProgress", "UnauthorizedOperation.InvalidToken",
        "UnauthorizedOperation.MFAExpired", "UnauthorizedOperation.MFANotFound", "UnsupportedOperation",
        "UnsupportedOperation.InstanceChargeType", "UnsupportedOperation.InstanceMixedPricingModel",
        "UnsupportedOperation.InstanceStateBanning", "UnsupportedOperation.InstanceStateEnterRescueMode",
        "UnsupportedOperation.InstanceStateEnterServiceLiveMigrate",
        "UnsupportedOperation.InstanceStateExitRescueMode",
        "UnsupportedOperation.InstanceStateExitServiceLiveMigrate",
        "UnsupportedOperation.InstanceStateFreezing", "UnsupportedOperation.InstanceStateIsolating",
        "UnsupportedOperation.InstanceStateLaunchFailed", "UnsupportedOperation.InstanceStatePending",
        "UnsupportedOperation.InstanceStateRebooting", "UnsupportedOperation.InstanceStateStarting",
        "UnsupportedOperation.InstanceStateStopping", "UnsupportedOperation.InstanceStateTerminated",
        "UnsupportedOperation.InstanceStateTerminating", "UnsupportedOperation.InstancesProtected",
        "UnsupportedOperation.InvalidInstancesOwner", "UnsupportedOperation.RedHatInstanceTerminateUnsupported",
        "UnsupportedOperation.RedHatInstanceUnsupported", "UnsupportedOperation.Region",
        "UnsupportedOperation.SpecialInstanceType", "UnsupportedOperation.UserLimitOperationExceedQuota",
    }),
    "DescribeInstances": frozenset({
        "FailedOperation.IllegalTagKey", "FailedOperation.IllegalTagValue", "FailedOperation.TagKeyReserved",
        "InternalServerError", "InvalidFilter", "InvalidFilterValue.LimitExceeded", "InvalidHostId.Malformed",
        "InvalidInstanceId.Malformed", "InvalidParameter", "InvalidParameterValue",
        "InvalidParameterValue.IPAddressMalformed", "InvalidParameterValue.IPv6AddressMalformed",
        "InvalidParameterValue.InstanceIdMalformed", "InvalidParameterValue.InvalidAppIdFormat",
        "InvalidParameterValue.InvalidIpFormat", "InvalidParameterValue.InvalidTimeFormat",
        "InvalidParameterValue.InvalidVagueName", "InvalidParameterValue.LimitExceeded",
        "InvalidParameterValue.SubnetIdMalformed", "InvalidParameterValue.TagKeyNotFound",
        "InvalidParameterValue.UuidMalformed", "InvalidParameterValue.VpcIdMalformed",
        "InvalidSecurityGroupId.NotFound", "InvalidSgId.Malformed", "InvalidZone.MismatchRegion",
        "ResourceNotFound.HpcCluster", "UnauthorizedOperation.InvalidToken", "UnsupportedOperation",
    }),
    "InquiryPriceRunInstances": frozenset({
        "AccountQualificationRestrictions", "AuthFailure.CamRoleNameAuthenticateFailed",
        "FailedOperation.DisasterRecoverGroupNotFound", "FailedOperation.IllegalTagKey",
        "FailedOperation.IllegalTagValue", "FailedOperation.InquiryPriceFailed",
        "FailedOperation.SnapshotSizeLargerThanDataSize", "FailedOperation.TagKeyReserved",
        "FailedOperation.TatAgentNotSupport", "InstancesQuotaLimitExceeded", "InternalError.TradeUnknownError",
        "InvalidClientToken.TooLong", "InvalidHostId.Malformed", "InvalidHostId.NotFound",
        "InvalidImageId.Malformed", "InvalidImageId.NotFound", "InvalidInstanceName.TooLong",
        "InvalidInstanceType.Malformed", "InvalidParameter.EdgeZoneMissInternetAccessible",
        "InvalidParameter.HostIdCustomizedInstanceTypeNotSupport",
        "InvalidParameter.HostIdInstanceTypeNotSupport",
        "InvalidParameter.HostIdStandardInstanceTypeNotSupport", "InvalidParameter.InstanceImageNotSupport",
        "InvalidParameter.InstanceTypeSupportedHostNotFound", "InvalidParameter.InternetAccessibleNotSupported",
        "InvalidParameter.OnlySupportForEdgeZone", "InvalidParameter.SnapshotNotFound",
        "InvalidParameter.SpecialParameterForSpecialAccount", "InvalidParameterCombination",
        "InvalidParameterValue", "InvalidParameterValue.BandwidthPackageIdMalformed",
        "InvalidParameterValue.BandwidthPackageIdNotFound", "InvalidParameterValue.BandwidthPackageIspNotMatch",
        "InvalidParameterValue.BandwidthPackageZoneNotMatch",
        "InvalidParameterValue.CloudSsdDataDiskSizeTooSmall", "InvalidParameterValue.DuplicateTags",
        "InvalidParameterValue.InstanceTypeNotFound", "InvalidParameterValue.InstanceTypeNotSupportHpcCluster",
        "InvalidParameterValue.InstanceTypeRequiredHpcCluster", "InvalidParameterValue.InsufficientPrice",
        "InvalidParameterValue.InvalidAppIdFormat", "InvalidParameterValue.InvalidImageFormat",
        "InvalidParameterValue.InvalidImageId", "InvalidParameterValue.InvalidImageOsName",
        "InvalidParameterValue.InvalidImageState", "InvalidParameterValue.InvalidInstanceTypePeriodicContract",
        "InvalidParameterValue.InvalidTimeFormat", "InvalidParameterValue.InvalidUserDataFormat",
        "InvalidParameterValue.IspNotSupportForEdgeZone", "InvalidParameterValue.IspValueRepeated",
        "InvalidParameterValue.LimitExceeded", "InvalidParameterValue.Range",
        "InvalidParameterValue.RequiredLocationImage", "InvalidParameterValue.SnapshotIdMalformed",
        "InvalidParameterValue.TagKeyNotFound", "InvalidParameterValue.TagQuotaLimitExceeded",
        "InvalidParameterValue.ZoneNotSupported", "InvalidPassword", "InvalidPeriod", "InvalidPermission",
        "InvalidProjectId.NotFound", "InvalidZone.MismatchRegion", "LimitExceeded.DisasterRecoverGroup",
        "LimitExceeded.InstanceEniNumLimit", "MissingParameter", "MissingParameter.MonitorService",
        "ResourceInsufficient.CloudDiskUnavailable", "ResourceInsufficient.DisasterRecoverGroupCvmQuota",
        "ResourceNotFound.HpcCluster", "ResourceNotFound.NoDefaultCbs",
        "ResourceNotFound.NoDefaultCbsWithReason", "ResourceUnavailable.InstanceType",
        "ResourcesSoldOut.SpecifiedInstanceType", "UnsupportedOperation.BandwidthPackageIdNotSupported",
        "UnsupportedOperation.InstanceTypeNotSupportGridLicence",
        "UnsupportedOperation.InstanceTypeNotSupportJumboFrame", "UnsupportedOperation.InvalidDisk",
        "UnsupportedOperation.InvalidRegionDiskEncrypt", "UnsupportedOperation.NoInstanceTypeSupportSpot",
        "UnsupportedOperation.NotSupportImportInstancesActionTimer",
        "UnsupportedOperation.OnlyForPrepaidAccount",
        "UnsupportedOperation.PeriodicContractNotSupportManualRenew",
        "UnsupportedOperation.SpotUnsupportedRegion",
        "UnsupportedOperation.UnderwritingInstanceTypeOnlySupportAutoRenew",
        "UnsupportedOperation.UnsupportedInternationalUser",
    }),
    "StopInstances": frozenset({
        "InternalServerError", "InvalidInstance.NotSupported", "InvalidInstanceId.Malformed",
        "InvalidInstanceId.NotFound", "InvalidParameterCombination", "InvalidParameterValue",
        "InvalidParameterValue.InstanceIdMalformed", "InvalidParameterValue.LimitExceeded",
        "InvalidParameterValue.ZoneNotSupported", "MissingParameter", "MutexOperation.TaskRunning",
        "OperationDenied.InstanceOperationInProgress", "UnauthorizedOperation.MFAExpired",
        "UnauthorizedOperation.MFANotFound", "UnsupportedOperation.HibernationForNormalInstance",
        "UnsupportedOperation.InstanceReinstallFailed", "UnsupportedOperation.InstanceStateBanning",
        "UnsupportedOperation.InstanceStateCorrupted", "UnsupportedOperation.InstanceStateEnterRescueMode",
        "UnsupportedOperation.InstanceStateEnterServiceLiveMigrate",
        "UnsupportedOperation.InstanceStateExitRescueMode",
        "UnsupportedOperation.InstanceStateExitServiceLiveMigrate",
        "UnsupportedOperation.InstanceStateFreezing", "UnsupportedOperation.InstanceStateIsolating",
        "UnsupportedOperation.InstanceStatePending", "UnsupportedOperation.InstanceStateRebooting",
        "UnsupportedOperation.InstanceStateRescueMode", "UnsupportedOperation.InstanceStateServiceLiveMigrate",
        "UnsupportedOperation.InstanceStateShutdown", "UnsupportedOperation.InstanceStateStarting",
        "UnsupportedOperation.InstanceStateStopped", "UnsupportedOperation.InstanceStateStopping",
        "UnsupportedOperation.InstanceStateTerminated", "UnsupportedOperation.InstanceStateTerminating",
        "UnsupportedOperation.StoppedModeStopCharging",
    }),
    "StartInstances": frozenset({
        "InternalServerError", "InvalidInstance.NotSupported", "InvalidInstanceId.Malformed",
        "InvalidInstanceId.NotFound", "InvalidParameterValue", "InvalidParameterValue.InstanceIdMalformed",
        "InvalidParameterValue.LimitExceeded", "InvalidParameterValue.ZoneNotSupported", "MissingParameter",
        "MutexOperation.TaskRunning", "OperationDenied.InstanceOperationInProgress",
        "UnsupportedOperation.InstanceReinstallFailed", "UnsupportedOperation.InstanceStateCorrupted",
        "UnsupportedOperation.InstanceStateEnterRescueMode", "UnsupportedOperation.InstanceStateExitRescueMode",
        "UnsupportedOperation.InstanceStateFreezing", "UnsupportedOperation.InstanceStateIsolating",
        "UnsupportedOperation.InstanceStatePending", "UnsupportedOperation.InstanceStateRebooting",
        "UnsupportedOperation.InstanceStateRescueMode", "UnsupportedOperation.InstanceStateRunning",
        "UnsupportedOperation.InstanceStateServiceLiveMigrate", "UnsupportedOperation.InstanceStateShutdown",
        "UnsupportedOperation.InstanceStateStarting", "UnsupportedOperation.InstanceStateStopped",
        "UnsupportedOperation.InstanceStateStopping", "UnsupportedOperation.InstanceStateTerminated",
        "UnsupportedOperation.InstanceStateTerminating",
    }),
    "DescribeZoneInstanceConfigInfos": frozenset({
        "InvalidFilter", "InvalidFilterValue.LimitExceeded", "InvalidInstanceId.Malformed",
        "InvalidInstanceId.NotFound", "InvalidInstanceType.Malformed",
        "InvalidParameterValue.InstanceIdMalformed", "InvalidParameterValue.InvalidAppIdFormat",
        "InvalidParameterValue.LimitExceeded", "InvalidParameterValue.ZoneNotSupported",
        "InvalidRegion.NotFound", "InvalidZone.MismatchRegion", "ResourceInsufficient.AvailabilityZoneSoldOut",
        "UnsupportedOperation", "UnsupportedOperation.UnsupportedPool",
    }),
    "common": frozenset({
        "ActionOffline", "AuthFailure.InvalidAuthorization", "AuthFailure.InvalidSecretId",
        "AuthFailure.MFAFailure", "AuthFailure.SecretIdNotFound", "AuthFailure.SignatureExpire",
        "AuthFailure.SignatureFailure", "AuthFailure.TokenFailure", "AuthFailure.UnauthorizedOperation",
        "DryRunOperation", "FailedOperation", "InternalError", "InvalidAction", "InvalidParameter",
        "InvalidParameterValue", "InvalidRequest", "IpInBlacklist", "IpNotInWhitelist", "LimitExceeded",
        "MissingParameter", "NoSuchProduct", "NoSuchVersion", "RequestLimitExceeded",
        "RequestLimitExceeded.GlobalRegionUinLimitExceeded", "RequestLimitExceeded.IPLimitExceeded",
        "RequestLimitExceeded.UinLimitExceeded", "RequestSizeLimitExceeded", "ResourceInUse",
        "ResourceInsufficient", "ResourceNotFound", "ResourceUnavailable", "ResponseSizeLimitExceeded",
        "ServiceUnavailable", "UnauthorizedOperation", "UnknownParameter", "UnsupportedOperation",
        "UnsupportedProtocol", "UnsupportedRegion",
    }),
}

ALSO_KNOWN: Mapping[str, str] = {
    "ResourceInsufficient.ZoneSoldOutForSpecifiedInstance": "sold out in the zone (CVM RunInstances, older list)",
    "ResourceNotFound.InvalidInstanceIdNotFound": "an instance id CVM does not know (older list)",
    "ClientNetworkError": "the SDK: the request did not reach CVM, or its answer never came back",
    "ServerNetworkError": "the SDK: CVM answered with an HTTP status other than 200",
    "JSONDecodeError": "the SDK: an answer that is not JSON (a gateway error page)",
    "ClientError": "the SDK: a request it could not build",
    "ClientParamsError": "the SDK: parameters it could not serialise",
}

# Codes a TerminateInstances may answer for an instance already destroyed, in the recycle bin, on its way
# there, or never created: what terminate wants is already true.
GONE_ON_TERMINATE = frozenset({
    "InvalidInstanceId.NotFound", "InvalidInstanceId.Malformed", "ResourceNotFound.InvalidInstanceIdNotFound",
    "UnsupportedOperation.InstanceStateTerminating", "UnsupportedOperation.InstanceStateTerminated",
    "UnsupportedOperation.InstanceStateShutdown", "UnsupportedOperation.InstanceStateIsolating",
    "UnsupportedOperation.InstanceStateLaunchFailed",
})

# Not here, try elsewhere: the zone, the type or the spot market has nothing to sell right now.
_NO_CAPACITY = frozenset({
    "ResourceInsufficient.AvailabilityZoneSoldOut", "ResourceInsufficient.CloudDiskSoldOut",
    "ResourceInsufficient.CloudDiskUnavailable", "ResourceInsufficient.InsufficientOfferingMinimum",
    "ResourceInsufficient.SpecifiedInstanceType", "ResourceInsufficient.ZoneSoldOutForSpecifiedInstance",
    "ResourceInsufficient.CidrBlock", "ResourcesSoldOut.SpecifiedInstanceType", "ResourcesSoldOut.EipInsufficient",
    "ResourceUnavailable.InstanceType", "InvalidParameterValue.InsufficientOffering",
    "InvalidParameterValue.InsufficientPrice", "InvalidParameterValue.ZoneNotSupported",
    "UnsupportedOperation.SpotUnsupportedRegion", "UnsupportedOperation.NoInstanceTypeSupportSpot",
    "FailedOperation.NoAvailableIpAddressCountInSubnet", "ResourceInsufficient",
})
_QUOTA = frozenset({
    "LimitExceeded", "LimitExceeded.CvmInstanceQuota", "LimitExceeded.CvmsVifsPerSecGroupLimitExceeded",
    "LimitExceeded.DisasterRecoverGroup", "LimitExceeded.IPv6AddressNum", "LimitExceeded.InstanceEniNumLimit",
    "LimitExceeded.InstanceQuota", "LimitExceeded.PrepayQuota", "LimitExceeded.PrepayUnderwriteQuota",
    "LimitExceeded.SingleUSGQuota", "LimitExceeded.SpotQuota", "LimitExceeded.UserReturnQuota",
    "LimitExceeded.UserSpotQuota", "LimitExceeded.VpcSubnetNum", "InstancesQuotaLimitExceeded",
    "ResourceInsufficient.DisasterRecoverGroupCvmQuota", "InvalidParameterValue.ExternalIpQuotaLimited",
    "InvalidParameterValue.TagQuotaLimitExceeded", "UnsupportedOperation.UserLimitOperationExceedQuota",
})
_BILLING = frozenset({"InvalidAccount.InsufficientBalance", "InvalidAccount.UnpaidOrder"})
_AUTH = frozenset({
    "AuthFailure.InvalidAuthorization", "AuthFailure.InvalidSecretId", "AuthFailure.MFAFailure",
    "AuthFailure.SecretIdNotFound", "AuthFailure.SignatureExpire", "AuthFailure.SignatureFailure",
    "AuthFailure.TokenFailure", "AuthFailure.UnauthorizedOperation", "AuthFailure.CamRoleNameAuthenticateFailed",
    "UnauthorizedOperation", "UnauthorizedOperation.InvalidToken", "UnauthorizedOperation.MFAExpired",
    "UnauthorizedOperation.MFANotFound", "InvalidPermission", "IpInBlacklist", "IpNotInWhitelist",
    "AccountQualificationRestrictions", "OperationDenied.AccountNotSupported",
})
_THROTTLED = frozenset({
    "RequestLimitExceeded", "RequestLimitExceeded.GlobalRegionUinLimitExceeded", "RequestLimitExceeded.IPLimitExceeded",
    "RequestLimitExceeded.UinLimitExceeded",
})
# Another task holds the instance: the same call works once it ends.
_BUSY = frozenset({"MutexOperation.TaskRunning", "OperationDenied.InstanceOperationInProgress", "ResourceInUse"})
_NOT_FOUND = frozenset({"InvalidInstanceId.NotFound", "ResourceNotFound.InvalidInstanceIdNotFound"})
_UNAVAILABLE = frozenset({
    "InternalError", "InternalError.TradeUnknownError", "InternalServerError", "ServiceUnavailable",
    "FailedOperation.InquiryPriceFailed", "ClientNetworkError", "ServerNetworkError", "JSONDecodeError",
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


def classify(code: str) -> type[ProviderError]:
    """The class of any CVM (or SDK) code: the table's, else a rule for codes CVM may add."""
    known = documented_class(code)
    if known is not None:
        return known
    if code.startswith("RequestLimitExceeded"):
        return Throttled
    if code.startswith(("ResourcesSoldOut.", "ResourceInsufficient.")):
        return NoCapacity
    if code.startswith("LimitExceeded."):
        return QuotaExceeded
    if code.startswith(("AuthFailure", "UnauthorizedOperation")):
        return AuthFailed
    if code.startswith(("InternalError", "ServiceUnavailable")):
        return ProviderUnavailable
    if "." not in code and code.endswith(("Error", "Exception")):
        return ProviderUnavailable  # not a CVM code: the SDK could not read an answer
    return InvalidRequest
