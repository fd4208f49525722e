//! Router policy classes: the `--router-policy-config` YAML file and the profile it resolves to.
//!
//! A profile is a list of queue classes and a rule that sends each request to one of them.
//! Without a file there is one synthetic class, `default`, built from `router_queue_threshold`
//! and `router_queue_policy`. A file defines policy *families* crossed with *cache buckets*
//! (ranges of uncached prompt tokens), plus explicit classes that a request names directly; an
//! optional `models:` map gives per-model profiles chosen by `--model-name`.
//!
//! Every mapping rejects unknown keys; the validation rules and their messages follow the
//! reference. A class's `admission` block (an online admission policy) is accepted and has no
//! effect on an offline replay.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use serde::Deserialize;

/// Order of the KV router's pending-request queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RouterQueuePolicy {
    /// First come, first served.
    #[default]
    Fcfs,
    /// Last come, first served.
    Lcfs,
    /// Weighted shortest processing time.
    Wspt,
}

impl RouterQueuePolicy {
    /// Parses the engine-args override (`router_queue_policy` in `--extra-engine-args`), which
    /// the reference reads with its own wording.
    pub(crate) fn from_engine_arg(text: &str) -> std::result::Result<Self, String> {
        match text {
            "fcfs" => Ok(Self::Fcfs),
            "lcfs" => Ok(Self::Lcfs),
            "wspt" => Ok(Self::Wspt),
            _ => Err(format!(
                "unknown queue policy: {text:?}, expected 'fcfs', 'lcfs', or 'wspt'"
            )),
        }
    }
}

const SYNTHETIC_CLASS_NAME: &str = "default";

/// One queue class.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyClass {
    pub name: String,
    pub queue_policy: RouterQueuePolicy,
    /// Deficit added per round robin visit (> 0).
    pub quantum: usize,
    /// Busy above this many active prefill tokens.
    pub prefill_busy_threshold: Option<usize>,
    /// Busy above this fraction of the worker's `max_num_batched_tokens`.
    pub prefill_busy_threshold_frac: Option<f64>,
    pub request_queue_limit_per_worker: Option<usize>,
    pub raw_isl_token_queue_limit_per_worker: Option<usize>,
    pub cached_token_queue_limit_per_worker: Option<usize>,
}

impl PolicyClass {
    /// A class without any busy threshold never holds requests back.
    pub fn queues(&self) -> bool {
        self.prefill_busy_threshold.is_some() || self.prefill_busy_threshold_frac.is_some()
    }

    /// Whether a (worker, rank) with `active_prefill_tokens` counts as busy for this class.
    pub fn is_busy(&self, active_prefill_tokens: usize, max_batched_tokens: u64) -> bool {
        let over_absolute = self
            .prefill_busy_threshold
            .is_some_and(|threshold| active_prefill_tokens > threshold);
        let over_fraction = self
            .prefill_busy_threshold_frac
            .is_some_and(|frac| active_prefill_tokens as f64 > frac * max_batched_tokens as f64);
        over_absolute || over_fraction
    }
}

/// The classes of one profile and how a request is classified.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyProfile {
    pub(crate) classes: Vec<PolicyClass>,
    classifier: Classifier,
}

#[derive(Clone, Debug, PartialEq)]
enum Classifier {
    Single,
    FamilyBucket {
        default_family: usize,
        families: HashMap<String, usize>,
        explicit: HashMap<String, usize>,
        /// `min_tokens` of each bucket, strictly increasing from 0.
        bucket_min_tokens: Vec<usize>,
        /// Class index of each (family, bucket) cell, family-major.
        cells: Vec<usize>,
    },
}

impl PolicyProfile {
    /// The single class used without a policy file.
    pub fn synthetic(threshold_frac: Option<f64>, queue_policy: RouterQueuePolicy) -> Self {
        Self {
            classes: vec![PolicyClass {
                name: SYNTHETIC_CLASS_NAME.to_string(),
                queue_policy,
                quantum: 1,
                prefill_busy_threshold: None,
                prefill_busy_threshold_frac: threshold_frac,
                request_queue_limit_per_worker: None,
                raw_isl_token_queue_limit_per_worker: None,
                cached_token_queue_limit_per_worker: None,
            }],
            classifier: Classifier::Single,
        }
    }

    pub fn classes(&self) -> &[PolicyClass] {
        &self.classes
    }

    pub fn class(&self, index: usize) -> &PolicyClass {
        &self.classes[index]
    }

    /// The class a request's `policy_class` names outright (explicit classes, or the only
    /// class), without looking at the cache.
    pub fn direct_class(&self, requested: Option<&str>) -> Option<usize> {
        match &self.classifier {
            Classifier::Single => Some(0),
            Classifier::FamilyBucket { explicit, .. } => {
                requested.and_then(|name| explicit.get(name).copied())
            }
        }
    }

    /// The class of a request: an explicit class it names, else the cell of its family (the
    /// requested name if it is a family, otherwise the default family) and of the last bucket
    /// whose `min_tokens` does not exceed `uncached_tokens`.
    pub fn classify(&self, requested: Option<&str>, uncached_tokens: usize) -> usize {
        if let Some(index) = self.direct_class(requested) {
            return index;
        }
        let Classifier::FamilyBucket {
            default_family,
            families,
            bucket_min_tokens,
            cells,
            ..
        } = &self.classifier
        else {
            unreachable!("the single-class profile classifies directly")
        };
        let family = requested
            .and_then(|name| families.get(name).copied())
            .unwrap_or(*default_family);
        let bucket = bucket_min_tokens
            .partition_point(|&min| min <= uncached_tokens)
            .saturating_sub(1);
        cells[family * bucket_min_tokens.len() + bucket]
    }
}

/// A validated policy file: an optional root profile and per-model profiles.
#[derive(Clone, Debug, PartialEq)]
pub struct RouterPolicyConfig {
    root: Option<PolicyProfile>,
    models: BTreeMap<String, PolicyProfile>,
}

/// The largest policy file read: policy YAML is a few KiB; the cap keeps `/dev/zero` or a
/// wrong path to a huge file from filling memory.
const MAX_POLICY_FILE_BYTES: u64 = 16 << 20;

/// The file's text, refusing files larger than [`MAX_POLICY_FILE_BYTES`].
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_POLICY_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_POLICY_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "the file is larger than {} MiB; a policy file is a small YAML document",
            MAX_POLICY_FILE_BYTES >> 20
        )));
    }
    Ok(text)
}

impl RouterPolicyConfig {
    /// Reads and validates the file at `path`. Messages follow the reference's wording.
    pub fn from_path(path: &str) -> Result<Self, String> {
        let text = read_bounded(Path::new(path))
            .map_err(|error| format!("failed to read router policy config {path}: {error}"))?;
        Self::from_yaml(&text).map_err(|error| match error {
            PolicyError::Parse(message) => {
                format!("failed to parse router policy config {path}: {message}")
            }
            PolicyError::Invalid(message) => format!("invalid router policy config: {message}"),
        })
    }

    fn from_yaml(text: &str) -> Result<Self, PolicyError> {
        let raw: RawPolicyFile =
            serde_yaml_ng::from_str(text).map_err(|e| PolicyError::Parse(e.to_string()))?;
        raw.resolve().map_err(PolicyError::Invalid)
    }

    /// The profile for `model_name`: its `models:` entry, else the root profile, else the
    /// synthetic single class.
    pub fn resolve_profile(
        &self,
        model_name: Option<&str>,
        threshold_frac: Option<f64>,
        queue_policy: RouterQueuePolicy,
    ) -> PolicyProfile {
        model_name
            .and_then(|name| self.models.get(name))
            .or(self.root.as_ref())
            .cloned()
            .unwrap_or_else(|| PolicyProfile::synthetic(threshold_frac, queue_policy))
    }
}

enum PolicyError {
    Parse(String),
    Invalid(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicyFile {
    #[serde(default)]
    default_policy_family: Option<String>,
    #[serde(default)]
    policy_classes: Option<Vec<RawClass>>,
    #[serde(default)]
    uncached_isl_buckets: Option<Vec<RawBucket>>,
    #[serde(default)]
    models: BTreeMap<String, RawProfile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    default_policy_family: String,
    policy_classes: Vec<RawClass>,
    uncached_isl_buckets: Vec<RawBucket>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBucket {
    min_tokens: usize,
    bucket: String,
}

/// An online admission policy: a `type` and its options. Offline replay ignores it.
#[derive(Deserialize)]
#[allow(dead_code)]
struct RawAdmission {
    #[serde(rename = "type")]
    policy_type: String,
    #[serde(flatten)]
    options: serde_yaml_ng::Mapping,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClass {
    name: String,
    #[serde(default)]
    policy_family: Option<String>,
    #[serde(default)]
    cache_bucket: Option<String>,
    #[serde(default)]
    queue_policy: RouterQueuePolicy,
    #[serde(default)]
    #[allow(dead_code)]
    admission: Option<RawAdmission>,
    quantum: usize,
    #[serde(default)]
    prefill_busy_threshold: Option<usize>,
    #[serde(default)]
    prefill_busy_threshold_frac: Option<f64>,
    #[serde(default)]
    request_queue_limit_per_worker: Option<usize>,
    #[serde(default)]
    raw_isl_token_queue_limit_per_worker: Option<usize>,
    #[serde(default)]
    cached_token_queue_limit_per_worker: Option<usize>,
}

impl RawPolicyFile {
    fn resolve(self) -> Result<RouterPolicyConfig, String> {
        let root = match (
            self.default_policy_family,
            self.policy_classes,
            self.uncached_isl_buckets,
        ) {
            (None, None, None) => None,
            (Some(default_policy_family), Some(policy_classes), Some(uncached_isl_buckets)) => {
                Some(resolve_profile(
                    RawProfile {
                        default_policy_family,
                        policy_classes,
                        uncached_isl_buckets,
                    },
                    "root",
                )?)
            }
            _ => {
                return Err("root profile must specify default_policy_family, \
                            uncached_isl_buckets, and policy_classes when any root profile \
                            field is present"
                    .into())
            }
        };
        let mut models = BTreeMap::new();
        for (name, profile) in self.models {
            if name.is_empty() {
                return Err("model profile name must not be empty".into());
            }
            let resolved = resolve_profile(profile, &format!("model {name:?}"))?;
            models.insert(name, resolved);
        }
        if root.is_none() && models.is_empty() {
            return Err(
                "router policy config must define a root profile or at least one model profile"
                    .into(),
            );
        }
        Ok(RouterPolicyConfig { root, models })
    }
}

fn check_identifier(name: &str, kind: &str, location: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{location} {kind} name {name:?} must match [A-Za-z0-9_.-]+"
        ))
    }
}

/// Where a class sits: named directly, or one (family, bucket) cell.
enum Binding {
    Explicit,
    Cell { family: String, bucket: usize },
}

fn resolve_profile(raw: RawProfile, location: &str) -> Result<PolicyProfile, String> {
    check_identifier(&raw.default_policy_family, "policy family", location)?;
    if raw.policy_classes.is_empty() {
        return Err(format!("{location} policy_classes must not be empty"));
    }

    // Buckets.
    if raw.uncached_isl_buckets.is_empty() {
        return Err(format!("{location} uncached_isl_buckets must not be empty"));
    }
    if raw.uncached_isl_buckets[0].min_tokens != 0 {
        return Err(format!(
            "{location} uncached_isl_buckets must start at min_tokens 0"
        ));
    }
    if raw
        .uncached_isl_buckets
        .windows(2)
        .any(|pair| pair[1].min_tokens <= pair[0].min_tokens)
    {
        return Err(format!(
            "{location} uncached_isl_buckets min_tokens must be strictly increasing"
        ));
    }
    let mut bucket_names = Vec::new();
    let mut bucket_index = HashMap::new();
    let mut bucket_min_tokens = Vec::new();
    for bucket in raw.uncached_isl_buckets {
        check_identifier(&bucket.bucket, "cache bucket", location)?;
        if bucket_index
            .insert(bucket.bucket.clone(), bucket_names.len())
            .is_some()
        {
            return Err(format!(
                "{location} contains duplicate cache bucket {:?}",
                bucket.bucket
            ));
        }
        bucket_names.push(bucket.bucket);
        bucket_min_tokens.push(bucket.min_tokens);
    }

    // Classes.
    let mut names = HashSet::new();
    let mut classes = Vec::new();
    let mut bindings = Vec::new();
    for class in raw.policy_classes {
        check_identifier(&class.name, "policy class", location)?;
        if class.quantum == 0 {
            return Err(format!(
                "{location} policy class {:?} quantum must be greater than zero",
                class.name
            ));
        }
        if class.queue_policy == RouterQueuePolicy::Lcfs {
            return Err(format!(
                "{location} policy class {:?} queue_policy must be fcfs or wspt",
                class.name
            ));
        }
        if class
            .prefill_busy_threshold_frac
            .is_some_and(|frac| !frac.is_finite() || frac < 0.0)
        {
            return Err(format!(
                "{location} policy class {:?} prefill_busy_threshold_frac must be finite and \
                 non-negative",
                class.name
            ));
        }
        let binding = match (
            class.policy_family.as_deref(),
            class.cache_bucket.as_deref(),
        ) {
            (None, None) => Binding::Explicit,
            (Some(family), Some(bucket)) => {
                check_identifier(family, "policy family", location)?;
                check_identifier(bucket, "cache bucket", location)?;
                let Some(&bucket) = bucket_index.get(bucket) else {
                    return Err(format!(
                        "{location} policy class {:?} references unknown cache bucket {bucket:?}",
                        class.name
                    ));
                };
                Binding::Cell {
                    family: family.to_string(),
                    bucket,
                }
            }
            _ => {
                return Err(format!(
                    "{location} policy class {:?} must specify both policy_family and \
                     cache_bucket or neither for an explicit class",
                    class.name
                ))
            }
        };
        if !names.insert(class.name.clone()) {
            return Err(format!(
                "{location} contains duplicate policy class {:?}",
                class.name
            ));
        }
        classes.push(PolicyClass {
            name: class.name,
            queue_policy: class.queue_policy,
            quantum: class.quantum,
            prefill_busy_threshold: class.prefill_busy_threshold,
            prefill_busy_threshold_frac: class.prefill_busy_threshold_frac,
            request_queue_limit_per_worker: class.request_queue_limit_per_worker,
            raw_isl_token_queue_limit_per_worker: class.raw_isl_token_queue_limit_per_worker,
            cached_token_queue_limit_per_worker: class.cached_token_queue_limit_per_worker,
        });
        bindings.push(binding);
    }

    // Families, in order of first appearance.
    let mut family_names: Vec<String> = Vec::new();
    let mut families = HashMap::new();
    for binding in &bindings {
        if let Binding::Cell { family, .. } = binding {
            if !families.contains_key(family) {
                families.insert(family.clone(), family_names.len());
                family_names.push(family.clone());
            }
        }
    }
    let Some(&default_family) = families.get(&raw.default_policy_family) else {
        return Err(format!(
            "{location} default_policy_family {:?} does not name a configured family",
            raw.default_policy_family
        ));
    };

    let bucket_count = bucket_names.len();
    let mut explicit = HashMap::new();
    let mut cells: Vec<Option<usize>> = vec![None; family_names.len() * bucket_count];
    for (index, binding) in bindings.into_iter().enumerate() {
        match binding {
            Binding::Explicit => {
                let name = &classes[index].name;
                if families.contains_key(name) {
                    return Err(format!(
                        "{location} explicit policy class {name:?} collides with a policy family"
                    ));
                }
                explicit.insert(name.clone(), index);
            }
            Binding::Cell { family, bucket } => {
                let cell = families[&family] * bucket_count + bucket;
                if cells[cell].replace(index).is_some() {
                    return Err(format!(
                        "{location} contains duplicate policy classes for family {family:?} and \
                         bucket {:?}",
                        bucket_names[bucket]
                    ));
                }
            }
        }
    }
    for (family_index, family) in family_names.iter().enumerate() {
        for (bucket, bucket_name) in bucket_names.iter().enumerate() {
            if cells[family_index * bucket_count + bucket].is_none() {
                return Err(format!(
                    "{location} is missing a policy class for family {family:?} and bucket \
                     {bucket_name:?}"
                ));
            }
        }
    }
    Ok(PolicyProfile {
        classes,
        classifier: Classifier::FamilyBucket {
            default_family,
            families,
            explicit,
            bucket_min_tokens,
            cells: cells.into_iter().map(|c| c.expect("checked")).collect(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<RouterPolicyConfig, String> {
        RouterPolicyConfig::from_yaml(yaml).map_err(|e| match e {
            PolicyError::Parse(m) => format!("parse: {m}"),
            PolicyError::Invalid(m) => m,
        })
    }

    const TWO_FAMILIES: &str = r#"
default_policy_family: standard
uncached_isl_buckets:
  - min_tokens: 0
    bucket: cached
  - min_tokens: 1024
    bucket: uncached
policy_classes:
  - name: std_cached
    policy_family: standard
    cache_bucket: cached
    quantum: 1
    prefill_busy_threshold: 100
  - name: std_uncached
    policy_family: standard
    cache_bucket: uncached
    queue_policy: wspt
    quantum: 4
    prefill_busy_threshold_frac: 0.5
  - name: batch_cached
    policy_family: batch
    cache_bucket: cached
    quantum: 2
  - name: batch_uncached
    policy_family: batch
    cache_bucket: uncached
    quantum: 2
    admission:
      type: something_online
      window: 3
  - name: vip
    quantum: 8
    prefill_busy_threshold: 0
models:
  small-model:
    default_policy_family: only
    uncached_isl_buckets:
      - min_tokens: 0
        bucket: all
    policy_classes:
      - name: only_all
        policy_family: only
        cache_bucket: all
        quantum: 1
"#;

    #[test]
    fn classifies_by_family_bucket_and_explicit_name() {
        let config = parse(TWO_FAMILIES).unwrap();
        let profile = config.resolve_profile(None, None, RouterQueuePolicy::Fcfs);
        let name = |requested: Option<&str>, uncached| {
            profile
                .class(profile.classify(requested, uncached))
                .name
                .clone()
        };
        assert_eq!(name(None, 0), "std_cached");
        assert_eq!(name(None, 1023), "std_cached");
        assert_eq!(name(None, 1024), "std_uncached");
        assert_eq!(name(Some("batch"), 5000), "batch_uncached");
        assert_eq!(name(Some("vip"), 5000), "vip");
        // Unknown names and cell class names fall back to the default family.
        assert_eq!(name(Some("nope"), 10), "std_cached");
        assert_eq!(name(Some("batch_cached"), 5000), "std_uncached");
        assert_eq!(profile.direct_class(Some("vip")), Some(4));
        assert_eq!(profile.direct_class(Some("batch")), None);
        assert!(profile.class(0).queues() && !profile.class(2).queues());
        assert_eq!(profile.class(1).queue_policy, RouterQueuePolicy::Wspt);
    }

    #[test]
    fn model_profiles_replace_the_root() {
        let config = parse(TWO_FAMILIES).unwrap();
        let model = config.resolve_profile(Some("small-model"), None, RouterQueuePolicy::Fcfs);
        assert_eq!(model.classes().len(), 1);
        assert_eq!(model.class(0).name, "only_all");
        let other = config.resolve_profile(Some("other"), None, RouterQueuePolicy::Fcfs);
        assert_eq!(other.classes().len(), 5);
        let models_only = parse(
            "models:\n  m:\n    default_policy_family: f\n    uncached_isl_buckets: \
             [{min_tokens: 0, bucket: b}]\n    policy_classes: [{name: c, policy_family: f, \
             cache_bucket: b, quantum: 1}]\n",
        )
        .unwrap();
        // No root and no matching model: the synthetic class from the router config.
        let synthetic = models_only.resolve_profile(None, Some(0.5), RouterQueuePolicy::Lcfs);
        assert_eq!(
            synthetic,
            PolicyProfile::synthetic(Some(0.5), RouterQueuePolicy::Lcfs)
        );
    }

    #[test]
    fn busy_is_strictly_above_either_threshold() {
        let class = PolicyClass {
            prefill_busy_threshold: Some(100),
            prefill_busy_threshold_frac: Some(0.5),
            ..PolicyProfile::synthetic(None, RouterQueuePolicy::Fcfs).classes[0].clone()
        };
        assert!(!class.is_busy(100, 1000));
        assert!(class.is_busy(101, 1000));
        assert!(class.is_busy(60, 100));
        assert!(!class.is_busy(50, 100));
    }

    #[test]
    fn rejects_invalid_files() {
        let cases = [
            ("{}", "router policy config must define a root profile or at least one model profile"),
            ("default_policy_family: a", "root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes when any root profile field is present"),
            ("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 1, bucket: b}]\npolicy_classes: [{name: c, quantum: 1}]",
             "root uncached_isl_buckets must start at min_tokens 0"),
            ("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}, {min_tokens: 0, bucket: c}]\npolicy_classes: [{name: c, quantum: 1}]",
             "root uncached_isl_buckets min_tokens must be strictly increasing"),
            ("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: c, quantum: 0}]",
             "root policy class \"c\" quantum must be greater than zero"),
            ("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: c, quantum: 1, queue_policy: lcfs}]",
             "root policy class \"c\" queue_policy must be fcfs or wspt"),
            ("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: c, quantum: 1}]",
             "root default_policy_family \"f\" does not name a configured family"),
            ("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}, {min_tokens: 5, bucket: u}]\npolicy_classes: [{name: c, policy_family: f, cache_bucket: b, quantum: 1}]",
             "root is missing a policy class for family \"f\" and bucket \"u\""),
            ("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: c, policy_family: f, quantum: 1}]",
             "root policy class \"c\" must specify both policy_family and cache_bucket or neither for an explicit class"),
            ("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: 'a b', quantum: 1}]",
             "root policy class name \"a b\" must match [A-Za-z0-9_.-]+"),
            ("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: f, policy_family: f, cache_bucket: b, quantum: 1}, {name: f, quantum: 1}]",
             "root contains duplicate policy class \"f\""),
            ("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: c, policy_family: f, cache_bucket: b, quantum: 1}, {name: f, quantum: 1}]",
             "root explicit policy class \"f\" collides with a policy family"),
        ];
        for (yaml, expected) in cases {
            assert_eq!(parse(yaml).unwrap_err(), expected, "{yaml}");
        }
        let unknown = parse("bogus: 1").unwrap_err();
        assert!(
            unknown.starts_with("parse: unknown field `bogus`"),
            "{unknown}"
        );
    }
}
