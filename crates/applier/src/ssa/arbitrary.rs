//! Test inputs: pseudo-random objects shaped like what API servers and charts produce, odd
//! corners included (`null` where a map is expected, labels that are no map, keys that sort
//! around `labels` and `namespace`, other managers' fields, escapes). Deterministic by seed.

use serde_json::{Map, Value, json};

/// A small deterministic generator (xorshift), enough to vary shapes.
pub(super) struct Gen(u64);

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[usize::try_from(self.below(from.len() as u64)).unwrap_or_default()]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn scalar(&mut self) -> Value {
        match self.below(6) {
            0 => Value::Null,
            1 => json!(self.below(5) as i64 - 1),
            2 => json!(self.chance(50)),
            3 => json!(self.pick(&["", "a", "x\"y", "ü", "line\nbreak", "\u{0}nul"])),
            4 => json!([self.below(3), "two"]),
            _ => json!({"k": self.pick(&["v", "w"])}),
        }
    }

    fn map(&mut self, keys: &[&str], value: &mut dyn FnMut(&mut Gen, &str) -> Value) -> Value {
        let mut m = Map::new();
        for _ in 0..self.below(keys.len() as u64 + 1) {
            let k = self.pick(keys);
            let v = value(self, k);
            m.insert(k.to_owned(), v);
        }
        Value::Object(m)
    }

    fn labels(&mut self) -> Value {
        match self.below(5) {
            0 => Value::Null,
            1 => json!("not a map"),
            _ => self.map(&["app", "apply.example.com/owner", "a", "zz", "tier", "apply.example.com/ownerx"], &mut |g, _| {
                if g.chance(90) { json!(g.pick(&["web", "db", "other-owner", ""])) } else { g.scalar() }
            }),
        }
    }

    fn managed(&mut self) -> Value {
        let mut entries = Vec::new();
        for _ in 0..self.below(4) {
            let mut e = Map::new();
            if self.chance(90) {
                e.insert("manager".into(), json!(self.pick(&["example-applier", "kubectl", "kube-controller-manager"])));
            }
            if self.chance(90) {
                e.insert("operation".into(), json!(self.pick(&["Apply", "Update"])));
            }
            if self.chance(30) {
                e.insert("subresource".into(), if self.chance(50) { json!(self.pick(&["", "status"])) } else { Value::Null });
            }
            if self.chance(85) {
                let fields = if self.chance(10) { Value::Null } else { json!({"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {}}}) };
                e.insert("fieldsV1".into(), fields);
            }
            e.insert("time".into(), json!("2026-11-23T10:00:00Z"));
            entries.push(Value::Object(e));
        }
        Value::Array(entries)
    }

    fn metadata(&mut self) -> Value {
        if self.chance(5) {
            return self.scalar();
        }
        self.map(
            &[
                "name",
                "namespace",
                "labels",
                "annotations",
                "managedFields",
                "deletionTimestamp",
                "generation",
                "uid",
                "finalizers",
                "nameX",
                "lab",
            ],
            &mut |g, k| match k {
                "name" | "namespace" => json!(g.pick(&["", "a", "team-a", "x\u{0}y"])),
                "labels" => g.labels(),
                "managedFields" => g.managed(),
                "deletionTimestamp" => {
                    if g.chance(50) {
                        Value::Null
                    } else {
                        json!("2026-11-23T10:00:00Z")
                    }
                }
                "generation" => {
                    if g.chance(80) {
                        json!(g.below(4))
                    } else {
                        g.scalar()
                    }
                }
                _ => g.scalar(),
            },
        )
    }

    /// One object.
    pub fn object(&mut self) -> Value {
        if self.chance(3) {
            return self.scalar();
        }
        let kinds = ["ConfigMap", "Deployment", "StatefulSet", "DaemonSet", "Service", "Pod", "Job", "CustomResourceDefinition", "Widget"];
        self.map(&["apiVersion", "kind", "metadata", "spec", "status", "data", "aaa", "zzz"], &mut |g, k| match k {
            "apiVersion" => json!(g.pick(&["v1", "apps/v1", "batch/v1", "apiextensions.k8s.io/v1", "example.com/v1"])),
            "kind" => json!(g.pick(&kinds)),
            "metadata" => g.metadata(),
            "spec" => {
                if g.chance(5) {
                    g.scalar()
                } else {
                    g.map(&["replicas", "updateStrategy", "type", "template", "selector"], &mut |g, k| match k {
                        "replicas" => json!(g.below(4)),
                        "updateStrategy" => json!({"type": g.pick(&["RollingUpdate", "OnDelete"])}),
                        "type" => json!(g.pick(&["ClusterIP", "LoadBalancer"])),
                        _ => g.scalar(),
                    })
                }
            }
            "status" => {
                g.map(&["conditions", "replicas", "readyReplicas", "observedGeneration", "phase", "loadBalancer"], &mut |g, k| match k {
                    "conditions" => json!([{"type": g.pick(&["Ready", "Established", "Available", "Progressing", "Failed", "Complete"]),
                    "status": g.pick(&["True", "False"]), "reason": g.pick(&["", "ProgressDeadlineExceeded", "Broken"])}]),
                    "phase" => json!(g.pick(&["Running", "Bound", "Terminating", "Failed"])),
                    _ => json!(g.below(4)),
                })
            }
            _ => g.scalar(),
        })
    }
}
