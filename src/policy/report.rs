//! The policy as JSON: what `opbound routes --json` prints and the admin listener's `/limits` serves.

use serde_json::{Value, json};

use super::{Algorithm, Bound, Missing, Mode, OnStoreError, Policy, Scope};

/// One bound as JSON.
pub fn bound(policy: &Policy, bound: &Bound) -> Value {
    let def = &bound.def;
    let scope = match &bound.scope {
        Scope::Route => json!("route"),
        Scope::Policy(name) => json!(format!("policy {name}")),
        Scope::Tag(name) => json!(format!("tag {name}")),
        Scope::Operation(op) => json!(format!("operation {}", policy.operations[*op].id)),
    };
    let mut value = json!({
        "id": bound.id,
        "scope": scope,
        "per": def.per.to_string(),
        "algorithm": def.algorithm.name(),
        "limit": def.limit.get(),
        "window": def.algorithm.window().map(|w| w.to_string()),
        "burst": match def.algorithm { Algorithm::TokenBucket { burst, .. } => Some(burst.get()), _ => None },
        "cost": def.cost.get(),
        "applies_to": {
            "roles": def.applies_to.roles,
            "authenticated": def.applies_to.authenticated,
        },
        "max_keys": def.max_keys.get(),
        "missing": match def.missing { Missing::Pass => "pass", Missing::Reject => "reject" },
        "on_store_error": match def.on_store_error { OnStoreError::Open => "open", OnStoreError::Closed => "closed", OnStoreError::Local => "local" },
        "mode": match def.mode { Mode::Enforce => "enforce", Mode::Shadow => "shadow" },
        "name": def.name,
        "description": def.describe(),
        "pointer": bound.pointer,
    });
    // Only quotas carry these, so the JSON of every other bound reads as it did.
    if let Some(periods) = def.algorithm.periods() {
        value["period"] = json!(periods.period().to_string());
        value["reset"] = json!(periods.reset());
        value["timezone"] = json!(periods.zone().name());
    }
    value
}

/// The route bounds, listed once, and every operation in spec order with the bounds of its own
/// (the route bounds apply to it too). Listed again under every operation, route bounds made
/// this hundreds of kilobytes of repeats on a large spec.
pub fn routes(policy: &Policy) -> Value {
    let route_bounds: Vec<Value> = policy.route_bounds.iter().map(|&b| bound(policy, &policy.bounds[b])).collect();
    let ops: Vec<Value> = policy
        .operations
        .iter()
        .map(|op| {
            let bounds: Vec<Value> = op.bounds.iter().map(|&b| bound(policy, &policy.bounds[b])).collect();
            json!({
                "method": op.method,
                "template": op.template,
                "operation": op.id,
                "paths": op.paths,
                "routable": op.routable,
                "shares_route_with": op.shares_route_with.iter().map(|&o| policy.operations[o].id.clone()).collect::<Vec<_>>(),
                "bounds": bounds,
            })
        })
        .collect();
    json!({ "route_bounds": route_bounds, "operations": ops })
}
