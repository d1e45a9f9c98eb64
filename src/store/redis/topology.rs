//! [`Topology`]: which node holds which keys (every key on one node, or per hash slot the master
//! a cluster's slot map names), and the reading of a `CLUSTER SLOTS` answer.

use std::sync::Arc;

use redis::Value;

use super::node::Node;
use super::target::slot;

/// The hash slots of a cluster.
pub(super) const SLOTS: usize = 16384;
/// A slot no master serves (the slot map has a hole).
pub(super) const UNSERVED: u16 = u16::MAX;

/// Which node holds which keys.
#[derive(Default)]
pub(super) struct Topology {
    pub nodes: Vec<Arc<Node>>,
    /// Per hash slot, its master's index in `nodes`; empty when one node holds every key.
    pub slots: Vec<u16>,
}

impl Topology {
    pub(super) fn node_for(&self, key: &str) -> Option<&Arc<Node>> {
        if self.slots.is_empty() {
            return self.nodes.first();
        }
        self.nodes.get(usize::from(self.slots[usize::from(slot(key))]))
    }

    pub(super) fn serves(&self, node: &Node) -> bool {
        self.nodes.iter().any(|n| std::ptr::eq(&**n, node))
    }

    /// Per slot, its master's address: two maps that say the same compare equal.
    pub(super) fn layout(&self) -> Vec<&str> {
        self.slots.iter().map(|&i| self.nodes.get(usize::from(i)).map_or("", |n| n.addr.as_str())).collect()
    }
}

/// The ranges of a `CLUSTER SLOTS` answer; a master without a host is the node asked.
pub(super) fn parse_slots(value: &Value, asked: &str) -> Option<Vec<(u16, u16, String)>> {
    let Value::Array(entries) = value else { return None };
    let asked_host = asked.rsplit_once(':').map_or(asked, |(h, _)| h);
    let mut ranges = Vec::new();
    for entry in entries {
        let Value::Array(fields) = entry else { return None };
        let int = |v: &Value| match v {
            Value::Int(i) => u16::try_from(*i).ok(),
            _ => None,
        };
        let (start, end) = (int(fields.first()?)?, int(fields.get(1)?)?);
        let Value::Array(master) = fields.get(2)? else { return None };
        let host = match master.first()? {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            _ => return None,
        };
        let port = int(master.get(1)?)?;
        let host = if host.is_empty() || host == "?" { asked_host.to_string() } else { host };
        ranges.push((start, end, format!("{host}:{port}")));
    }
    Some(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_slot_map_names_each_range_s_master() {
        let answer = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), Value::Array(vec![bulk(""), Value::Int(7001)])]),
        ]);
        assert_eq!(
            parse_slots(&answer, "10.0.0.9:7001"),
            Some(vec![(0, 5460, "127.0.0.1:7000".to_string()), (5461, 16383, "10.0.0.9:7001".to_string())])
        );
        assert_eq!(parse_slots(&Value::Int(1), "h:1"), None);
    }
}
