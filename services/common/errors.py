"""Errors of the services and the one table that maps them to gRPC status codes.

Service code raises these (or subclasses of them, in each service's `errors.py`); the server
pipeline (`services.common.interceptor`) turns them into a status with `status_for`. Anything
else that escapes a handler becomes INTERNAL with a fixed message, the traceback only in the log.

    ServiceError
    ├── InvalidArgumentError    INVALID_ARGUMENT   bad input; names the field
    ├── OutOfRangeError         OUT_OF_RANGE       a position past the end (e.g. after_seq)
    ├── NotFoundError           NOT_FOUND          unknown resource
    ├── AlreadyExistsError      ALREADY_EXISTS     resource exists; request id reused with other content
    ├── FailedPreconditionError FAILED_PRECONDITION rule violation: not your turn, illegal move,
    │                                               insufficient chips, stale view
    ├── ConflictError           ABORTED            concurrent modification, retry the transaction
    ├── PermissionDeniedError   PERMISSION_DENIED  acting for someone else, wrong identity kind
    ├── UnauthenticatedError    UNAUTHENTICATED    missing, bad, expired token
    ├── ResourceExhaustedError  RESOURCE_EXHAUSTED rate limit, too many streams
    ├── UnavailableError        UNAVAILABLE        shutting down
    │   └── NotOwnerError                          this replica does not own the resource (redirect)
    └── UnimplementedError      UNIMPLEMENTED      an RPC not built yet
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

Metadata = Sequence[tuple[str, str | bytes]]

#: Trailing metadata of a redirect: `host:port` of the replica that owns the resource.
OWNER_ADDRESS_HEADER = "buraco-owner-address"


class ServiceError(Exception):
    """Root of the services' errors. `message` is safe to show to the caller."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, *, metadata: Metadata = ()) -> None:
        super().__init__(message)
        self.message = message
        #: Trailing metadata sent with the status (e.g. `buraco-current-seq`, redirects).
        self.metadata: Metadata = tuple(metadata)


class InvalidArgumentError(ServiceError):
    """A request field is missing or wrong. The message starts with the field's path."""

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, field: str, problem: str, *, metadata: Metadata = ()) -> None:
        super().__init__(f"{field}: {problem}", metadata=metadata)
        self.field = field
        self.problem = problem


class OutOfRangeError(ServiceError):
    code = grpc.StatusCode.OUT_OF_RANGE


class NotFoundError(ServiceError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(ServiceError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(ServiceError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ConflictError(ServiceError):
    code = grpc.StatusCode.ABORTED


class PermissionDeniedError(ServiceError):
    code = grpc.StatusCode.PERMISSION_DENIED


class UnauthenticatedError(ServiceError):
    code = grpc.StatusCode.UNAUTHENTICATED


class ResourceExhaustedError(ServiceError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnavailableError(ServiceError):
    code = grpc.StatusCode.UNAVAILABLE


class NotOwnerError(UnavailableError):
    """This replica does not own the resource (a game table): tell the caller where the owner is.

    The status is UNAVAILABLE with the trailing metadata `buraco-owner-address` (when an owner is
    known) and the rich status details (`grpc-status-details-bin`, a google.rpc.Status) holding a
    `buraco.v1.NotOwnerDetails`. See docs/contracts.md, "Table ownership and redirects".
    """

    def __init__(
        self, resource: str, owner_address: str = "", *, epoch: int = 0, retry_after_ms: int = 0
    ) -> None:
        from google.protobuf import any_pb2
        from google.rpc import status_pb2

        from buraco.v1 import common_pb2

        message = (
            f"{resource} is owned by the replica at {owner_address}"
            if owner_address
            else f"{resource} has no owner at the moment; retry in {retry_after_ms} ms"
        )
        details = common_pb2.NotOwnerDetails(
            resource=resource, owner_address=owner_address, epoch=epoch, retry_after_ms=retry_after_ms
        )
        packed = any_pb2.Any()
        packed.Pack(details)
        status = status_pb2.Status(code=self.code.value[0], message=message, details=[packed])
        metadata: list[tuple[str, str | bytes]] = [("grpc-status-details-bin", status.SerializeToString())]
        if owner_address:
            metadata.append((OWNER_ADDRESS_HEADER, owner_address))
        super().__init__(message, metadata=metadata)
        self.details = details


class UnimplementedError(ServiceError):
    code = grpc.StatusCode.UNIMPLEMENTED


#: The message of every INTERNAL status: nothing about the failure leaks to the caller.
INTERNAL_MESSAGE = "internal error; the request id identifies it in the service's log"


def status_for(error: BaseException) -> tuple[grpc.StatusCode, str, Metadata]:
    """The one error-to-status table: (code, message, trailing metadata) for any exception."""
    if isinstance(error, ServiceError):
        return error.code, error.message, error.metadata
    if isinstance(error, NotImplementedError):  # the generated servicer base classes raise it
        return grpc.StatusCode.UNIMPLEMENTED, "method not implemented", ()
    return grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE, ()


def not_built(rpc: str, issue: int) -> UnimplementedError:
    """The UNIMPLEMENTED error of an RPC whose body a later issue builds."""
    return UnimplementedError(f"{rpc} is not implemented yet (issue #{issue} builds it)")
