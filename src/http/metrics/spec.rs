//! What every collector shares: a metric family's fixed description
//! ([`Spec`]), the `prometheus` descriptors made from it under a scrape's
//! prefix, and the builder that turns figures into a `MetricFamily`.

use prometheus::core::Desc;
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};

/// One metric family whose samples are read from rows of type `T`: its name
/// after the prefix, its type, its help text, and how to read a row's value
/// (`None`: this node cannot tell, and the family is left out).
pub struct Spec<T> {
    /// The name after `<prefix>_`.
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: MetricType,
    /// The `# HELP` text.
    pub help: &'static str,
    /// The sample's value for one row.
    pub value: fn(&T) -> Option<f64>,
}

impl<T> Spec<T> {
    /// A family description, usable in a `const` table.
    pub const fn new(name: &'static str, kind: MetricType, help: &'static str, value: fn(&T) -> Option<f64>) -> Self {
        Spec {
            name,
            kind,
            help,
            value,
        }
    }
}

/// A family's full name, `<prefix>_<name>`.
pub fn full_name(prefix: &str, name: &str) -> String {
    let mut full = String::with_capacity(prefix.len() + 1 + name.len());
    full.push_str(prefix);
    full.push('_');
    full.push_str(name);
    full
}

/// The descriptors of `specs` under `prefix`, each with the variable labels
/// `labels`: what a collector declares when it is registered.
pub fn descs<T>(prefix: &str, specs: &[Spec<T>], labels: &[&str]) -> prometheus::Result<Vec<Desc>> {
    specs
        .iter()
        .map(|s| describe(&full_name(prefix, s.name), s.help, labels))
        .collect()
}

/// One descriptor: `full` is the family's whole name.
pub fn describe(full: &str, help: &str, labels: &[&str]) -> prometheus::Result<Desc> {
    Desc::new(
        full.to_owned(),
        help.to_owned(),
        labels.iter().map(|l| (*l).to_owned()).collect(),
        Default::default(),
    )
}

/// Builds one `MetricFamily`, sample by sample.
pub struct FamilyBuilder {
    family: MetricFamily,
    kind: MetricType,
}

impl FamilyBuilder {
    /// An empty family described by `desc`, of type `kind`, with room for
    /// `rows` samples.
    pub fn new(desc: &Desc, kind: MetricType, rows: usize) -> Self {
        let mut family = MetricFamily::default();
        family.set_name(desc.fq_name.clone());
        family.set_help(desc.help.clone());
        family.set_field_type(kind);
        family.mut_metric().reserve(rows);
        FamilyBuilder { family, kind }
    }

    /// Adds a sample with `labels` (name, value pairs, in that order).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        let mut metric = Metric::default();
        if !labels.is_empty() {
            metric.set_label(
                labels
                    .iter()
                    .map(|(name, value)| {
                        let mut pair = LabelPair::default();
                        pair.set_name((*name).to_owned());
                        pair.set_value((*value).to_owned());
                        pair
                    })
                    .collect(),
            );
        }
        match self.kind {
            MetricType::COUNTER => {
                let mut c = Counter::default();
                c.set_value(value);
                metric.set_counter(c);
            }
            _ => {
                let mut g = Gauge::default();
                g.set_value(value);
                metric.set_gauge(g);
            }
        }
        self.family.mut_metric().push(metric);
    }

    /// The family built.
    pub fn finish(self) -> MetricFamily {
        self.family
    }
}

/// One family per spec, one sample per row: `labels` gives a row's label
/// values, in the order of the names the descriptors were made with.
pub fn row_families<T, const N: usize>(
    specs: &[Spec<T>],
    descs: &[Desc],
    rows: &[T],
    labels: impl Fn(&T) -> [(&'static str, &str); N],
) -> Vec<MetricFamily> {
    specs
        .iter()
        .zip(descs)
        .map(|(spec, desc)| {
            let mut family = FamilyBuilder::new(desc, spec.kind, rows.len());
            for row in rows {
                if let Some(value) = (spec.value)(row) {
                    family.sample(&labels(row), value);
                }
            }
            family.finish()
        })
        .collect()
}

/// One family per spec, each with the one unlabelled sample read from
/// `figures` (none when the spec cannot tell: the registry leaves it out).
pub fn single_families<T>(specs: &[Spec<T>], descs: &[Desc], figures: &T) -> Vec<MetricFamily> {
    specs
        .iter()
        .zip(descs)
        .map(|(spec, desc)| {
            let mut family = FamilyBuilder::new(desc, spec.kind, 1);
            if let Some(value) = (spec.value)(figures) {
                family.sample(&[], value);
            }
            family.finish()
        })
        .collect()
}

/// Heap bytes `families` hold, for the scrape's own memory figure.
pub fn heap_bytes(families: &[MetricFamily]) -> usize {
    let mut bytes = size_of_val(families);
    for family in families {
        bytes += family.name().len() + family.help().len();
        bytes += size_of_val(family.get_metric());
        for metric in family.get_metric() {
            let labels = metric.get_label();
            bytes += size_of_val(labels);
            bytes += labels.iter().map(|l| l.name().len() + l.value().len()).sum::<usize>();
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, TextEncoder};

    #[test]
    fn builds_families_the_text_encoder_writes() {
        struct Row(&'static str, u64);
        const SPECS: [Spec<Row>; 2] = [
            Spec::new("a_total", MetricType::COUNTER, "A\\b", |r| Some(r.1 as f64)),
            Spec::new("b", MetricType::GAUGE, "B", |r| (r.1 > 1).then_some(0.25)),
        ];
        let descs = descs("p", &SPECS, &["queue"]).expect("valid");
        let rows = [Row("x\"y", 1), Row("z", 2)];
        let families = row_families(&SPECS, &descs, &rows, |r| [("queue", r.0)]);
        let mut text = Vec::new();
        TextEncoder::new().encode(&families, &mut text).expect("encodes");
        assert_eq!(
            String::from_utf8(text).expect("utf-8"),
            "# HELP p_a_total A\\\\b\n\
             # TYPE p_a_total counter\n\
             p_a_total{queue=\"x\\\"y\"} 1\n\
             p_a_total{queue=\"z\"} 2\n\
             # HELP p_b B\n\
             # TYPE p_b gauge\n\
             p_b{queue=\"z\"} 0.25\n"
        );
        assert!(heap_bytes(&families) > 3 * size_of::<Metric>());
    }

    #[test]
    fn names_must_be_valid() {
        assert!(describe("p_ok:x", "help", &[]).is_ok());
        assert!(describe("p bad", "help", &[]).is_err());
        assert!(describe("p_ok", "", &[]).is_err());
    }
}
