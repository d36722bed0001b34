"""Every EC2 error code the AWS adapter can meet, and the class each one is.

This table is the adapter's mapping (``providers.aws.errors.classify_error`` reads it) and the source
of ``docs/error-codes.md`` (``scripts/error-codes`` writes that page from it; a test fails when the page
is stale). It imports no SDK.

EC2 documents its error codes on one page for all actions ("Error codes for the Amazon EC2 API"), not
per action: ``DOCUMENTED`` holds its common client errors and server errors (any call may answer them)
and, under each call the adapter makes, the action-specific codes of that page the call can answer.
``ALSO_KNOWN`` holds codes the adapter meets that the page lacks, each with where it comes from. A
documented code in no class set below is the request's own fault: ``InvalidRequest``.
"""

from __future__ import annotations

from collections.abc import Mapping

from providers.code_table import ClassSets, codes_of, listed_class
from scheduler.errors import (
    AuthFailed,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)

__all__ = ["ALSO_KNOWN", "CLASS_SETS", "DOCUMENTED", "all_codes", "classify", "documented_class"]

DOCUMENTED: Mapping[str, frozenset[str]] = {
    "common": frozenset({
        "AuthFailure", "Blocked", "DryRunOperation", "IdempotentParameterMismatch", "IncompleteSignature",
        "InvalidAction", "InvalidCharacter", "InvalidClientTokenId", "InvalidPaginationToken", "InvalidParameter",
        "InvalidParameterCombination", "InvalidParameterValue", "InvalidQueryParameter", "MalformedQueryString",
        "MissingAction", "MissingAuthenticationToken", "MissingParameter", "OptInRequired", "PendingVerification",
        "RequestExpired", "UnauthorizedOperation", "UnknownParameter", "UnsupportedInstanceAttribute",
        "UnsupportedOperation", "UnsupportedProtocol", "ValidationError",
        # server errors
        "InsufficientAddressCapacity", "InsufficientCapacity", "InsufficientInstanceCapacity",
        "InsufficientHostCapacity", "InsufficientReservedInstanceCapacity", "InsufficientVolumeCapacity",
        "InternalError", "InternalFailure", "RequestLimitExceeded", "ServiceUnavailable", "Unavailable",
    }),
    "RunInstances": frozenset({
        "IdempotentInstanceTerminated", "InstanceLimitExceeded", "InsufficientFreeAddressesInSubnet",
        "InvalidAMIID.Malformed", "InvalidAMIID.NotFound", "InvalidAMIID.Unavailable", "InvalidAvailabilityZone",
        "InvalidBlockDeviceMapping", "InvalidGroup.NotFound", "InvalidGroupId.Malformed",
        "InvalidIamInstanceProfileArn.Malformed", "InvalidInstanceType", "InvalidKeyPair.NotFound",
        "InvalidKeyPair.Format", "InvalidPlacementGroup.Unknown", "InvalidSecurityGroupId.Malformed",
        "InvalidSecurityGroupID.NotFound", "InvalidSubnet", "InvalidSubnetID.Malformed", "InvalidSubnetID.NotFound",
        "InvalidZone.NotFound", "MaxSpotInstanceCountExceeded", "SecurityGroupsPerInstanceLimitExceeded",
        "TagLimitExceeded", "Unsupported", "UnsupportedTenancy", "VolumeTypeNotAvailableInZone",
        "InsufficientCapacityOnHost", "IncompatibleHostRequirements", "UnsupportedHibernationConfiguration",
    }),
    "DescribeInstances": frozenset({
        "InvalidInstanceID.Malformed", "InvalidInstanceID.NotFound", "InvalidFilter", "FilterLimitExceeded",
        "InvalidNextToken",
    }),
    "StopInstances": frozenset({
        "IncorrectInstanceState", "InvalidInstanceID.Malformed", "InvalidInstanceID.NotFound", "NonEBSInstance",
        "UnsupportedOperation",
    }),
    "StartInstances": frozenset({
        "IncorrectInstanceState", "InvalidInstanceID.Malformed", "InvalidInstanceID.NotFound",
        "InsufficientInstanceCapacity",
    }),
    "TerminateInstances": frozenset({
        "IncorrectInstanceState", "InvalidInstanceID.Malformed", "InvalidInstanceID.NotFound",
        "OperationNotPermitted",
    }),
    "DescribeSpotPriceHistory": frozenset({"InvalidFilter", "FilterLimitExceeded", "InvalidNextToken"}),
}

ALSO_KNOWN: Mapping[str, str] = {
    "VcpuLimitExceeded": "the vCPU-based On-Demand limit (EC2 answers RunInstances with it since 2019)",
    "SpotMaxPriceTooLow": "a spot request's MaxPrice below the market (EC2 RunInstances for spot)",
    "UnfulfillableCapacity": "a capacity request that cannot be met (EC2 capacity errors)",
    "Throttling": "botocore's name for throttling on some endpoints",
    "ThrottlingException": "botocore's name for throttling on some endpoints",
    "SignatureDoesNotMatch": "the request signature is wrong (AWS query APIs)",
    "InvalidInstanceID": "an instance id that is not valid (EC2 error page)",
}

# Not here, try elsewhere: the zone or market has no capacity for the type right now.
_NO_CAPACITY = frozenset({
    "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity", "InsufficientAddressCapacity", "InsufficientVolumeCapacity",
    "InsufficientCapacityOnHost", "InsufficientFreeAddressesInSubnet", "UnfulfillableCapacity",
    "SpotMaxPriceTooLow", "VolumeTypeNotAvailableInZone",
    # "The requested configuration is currently not supported": the type is not sold in that zone
    # (for that market) right now; another offer may be.
    "Unsupported",
})
_QUOTA = frozenset({"InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"})
_AUTH = frozenset({
    "AuthFailure", "Blocked", "IncompleteSignature", "InvalidClientTokenId", "MissingAuthenticationToken",
    "OptInRequired", "PendingVerification", "RequestExpired", "SignatureDoesNotMatch", "UnauthorizedOperation",
})
_THROTTLED = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})
_NOT_FOUND = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed", "InvalidInstanceID"})
_UNAVAILABLE = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"})

CLASS_SETS: ClassSets = (
    (NoCapacity, _NO_CAPACITY),
    (QuotaExceeded, _QUOTA),
    (AuthFailed, _AUTH),
    (Throttled, _THROTTLED),
    (NotFound, _NOT_FOUND),
    (ProviderUnavailable, _UNAVAILABLE),
)


def all_codes() -> list[str]:
    """Every code in the table (documented and also known), sorted."""
    return codes_of(DOCUMENTED, ALSO_KNOWN)


def documented_class(code: str) -> type[ProviderError] | None:
    """The class of a code this table holds; None for a code it does not."""
    return listed_class(code, CLASS_SETS, DOCUMENTED, ALSO_KNOWN)


def classify(code: str, status: int) -> type[ProviderError]:
    """Our class for an EC2 error code (the table's first, then its family) or HTTP status."""
    known = documented_class(code)
    if known is not None:
        return known
    if code.startswith("InvalidParameter"):
        return InvalidRequest
    if code.startswith("AuthFailure"):
        return AuthFailed
    if code.startswith("Insufficient"):
        return NoCapacity
    if status >= 500:
        return ProviderUnavailable
    if status == 429:
        return Throttled
    if status in (401, 403):
        return AuthFailed
    if 400 <= status < 500:
        return InvalidRequest
    return ProviderError
