"""CreateAcls (30), DescribeAcls (29) and DeleteAcls (31) over the broker's
:class:`~kafkalog.server.acls.Authorizer`: SECURITY_DISABLED without one (as Kafka answers
when no authorizer is configured), INVALID_REQUEST for a binding or filter Kafka would refuse."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kafkalog.server import errors as E
from kafkalog.server.acls import AclBinding, AclFilter, binding_problem

if TYPE_CHECKING:
    from kafkalog.server.broker_interface import BrokerInterface as Broker


async def describe_acls(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    if broker.authorizer is None:
        return {"error_code": E.SECURITY_DISABLED, "error_message": "No Authorizer is configured"}
    acl_filter = AclFilter.of(body)
    problem = acl_filter.problem()
    if problem is not None:
        return {"error_code": E.INVALID_REQUEST, "error_message": problem, "resources": []}
    resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for a in broker.authorizer.acls:
        if acl_filter.matches(a):
            resources.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(
                {
                    "principal": a.principal,
                    "host": a.host,
                    "operation": a.operation,
                    "permission_type": a.permission_type,
                }
            )
    return {
        "error_code": E.NONE,
        "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": entries}
            for (t, n, p), entries in resources.items()
        ],
    }


async def create_acls(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    authorizer = broker.authorizer
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for c in body.creations:
        if authorizer is None:
            results.append(
                {"error_code": E.SECURITY_DISABLED, "error_message": "No Authorizer is configured"}
            )
            continue
        binding = AclBinding(
            int(c.resource_type),
            c.resource_name,
            int(c.resource_pattern_type),
            c.principal,
            c.host,
            int(c.operation),
            int(c.permission_type),
        )
        problem = binding_problem(binding)
        if problem is None:
            valid.append(binding)
            results.append({"error_code": E.NONE})
        else:
            results.append({"error_code": E.INVALID_REQUEST, "error_message": problem})
    if authorizer is not None and valid:
        authorizer.add(valid)
    return {"results": results}


async def delete_acls(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    authorizer = broker.authorizer
    if authorizer is None:
        disabled = {
            "error_code": E.SECURITY_DISABLED,
            "error_message": "No Authorizer is configured",
        }
        return {"filter_results": [dict(disabled) for _ in body.filters]}
    filters = [AclFilter.of(f) for f in body.filters]
    problems = [f.problem() for f in filters]
    matched = authorizer.remove([f for f, p in zip(filters, problems, strict=True) if p is None])
    results: list[dict[str, Any]] = []
    found = iter(matched)
    for problem in problems:
        if problem is not None:
            results.append({"error_code": E.INVALID_REQUEST, "error_message": problem})
            continue
        results.append(
            {
                "error_code": E.NONE,
                "matching_acls": [{"error_code": E.NONE, **asdict(a)} for a in next(found)],
            }
        )
    return {"filter_results": results}
