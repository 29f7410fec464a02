//! Topic matching as a trie of binding-key words, so routing cost follows the length
//! of the routing key rather than the number of bindings. `*` matches exactly one
//! word and `#` zero or more, with RabbitMQ's rules: an empty routing key has no
//! words, and empty words between dots are words like any other.

use rustc_hash::FxHashMap as HashMap;

use smallvec::SmallVec;

/// A set of binding keys, each with the values bound under it.
#[derive(Debug)]
pub struct TopicTrie<T> {
    root: Node<T>,
}

#[derive(Debug)]
struct Node<T> {
    words: HashMap<Box<str>, Node<T>>,
    star: Option<Box<Node<T>>>,
    hash: Option<Box<Node<T>>>,
    here: Vec<T>,
    /// Reached through a `#` edge: absorbs any number of words.
    is_hash: bool,
}

impl<T> Default for Node<T> {
    fn default() -> Self {
        Node {
            words: HashMap::default(),
            star: None,
            hash: None,
            here: Vec::new(),
            is_hash: false,
        }
    }
}

impl<T> Default for TopicTrie<T> {
    fn default() -> Self {
        TopicTrie { root: Node::default() }
    }
}

fn words(key: &str) -> SmallVec<[&str; 16]> {
    if key.is_empty() {
        SmallVec::new()
    } else {
        key.split('.').collect()
    }
}

/// Words of a binding key with runs of `#` collapsed into one: `#.#` means the same
/// as `#`, and collapsing keeps matching from exploding combinatorially.
fn pattern_words(key: &str) -> SmallVec<[&str; 16]> {
    let mut ws = words(key);
    ws.dedup_by(|a, b| *a == "#" && *b == "#");
    ws
}

impl<T: PartialEq> TopicTrie<T> {
    /// Adds `value` under binding key `key`.
    pub fn insert(&mut self, key: &str, value: T) {
        let mut node = &mut self.root;
        for w in pattern_words(key) {
            node = match w {
                "*" => node.star.get_or_insert_with(Box::default),
                "#" => node.hash.get_or_insert_with(|| {
                    Box::new(Node {
                        is_hash: true,
                        ..Node::default()
                    })
                }),
                _ => node.words.entry(w.into()).or_default(),
            };
        }
        node.here.push(value);
    }

    /// Removes `value` from binding key `key`; true if it was there.
    pub fn remove(&mut self, key: &str, value: &T) -> bool {
        fn rec<T: PartialEq>(node: &mut Node<T>, ws: &[&str], value: &T) -> bool {
            let Some((first, rest)) = ws.split_first() else {
                let before = node.here.len();
                node.here.retain(|v| v != value);
                return node.here.len() != before;
            };
            let (removed, empty) = match *first {
                "*" | "#" => {
                    let slot = if *first == "*" { &mut node.star } else { &mut node.hash };
                    let Some(child) = slot.as_mut() else {
                        return false;
                    };
                    let r = rec(child, rest, value);
                    (r, child.is_empty())
                }
                w => {
                    let Some(child) = node.words.get_mut(w) else {
                        return false;
                    };
                    let r = rec(child, rest, value);
                    (r, child.is_empty())
                }
            };
            if empty {
                match *first {
                    "*" => node.star = None,
                    "#" => node.hash = None,
                    w => {
                        node.words.remove(w);
                    }
                }
            }
            removed
        }
        rec(&mut self.root, &pattern_words(key), value)
    }

    /// Calls `f` for every value whose binding key matches `routing_key`; a value
    /// bound under several matching keys is reported once per key.
    pub fn matches<'a>(&'a self, routing_key: &str, f: &mut impl FnMut(&'a T)) {
        let ws = words(routing_key);
        walk(&self.root, &ws, f);
    }

    /// True when no key is bound.
    pub fn is_empty(&self) -> bool {
        self.root.is_empty()
    }
}

impl<T> Node<T> {
    fn is_empty(&self) -> bool {
        self.here.is_empty() && self.words.is_empty() && self.star.is_none() && self.hash.is_none()
    }
}

/// Adds `node` and what it reaches through `#` without consuming a word.
fn activate<'a, T>(node: &'a Node<T>, active: &mut SmallVec<[&'a Node<T>; 8]>) {
    let mut n = node;
    loop {
        if !active.iter().any(|x| std::ptr::eq(*x, n)) {
            active.push(n);
        }
        match &n.hash {
            Some(h) => n = h,
            None => return,
        }
    }
}

/// Simulates the trie as an automaton over the routing key's words, keeping the
/// set of active nodes, so matching costs words × nodes even for keys full of `#`.
fn walk<'a, T>(root: &'a Node<T>, ws: &[&str], f: &mut impl FnMut(&'a T)) {
    let mut active: SmallVec<[&'a Node<T>; 8]> = SmallVec::new();
    activate(root, &mut active);
    let mut next: SmallVec<[&'a Node<T>; 8]> = SmallVec::new();
    for w in ws {
        next.clear();
        for n in &active {
            if n.is_hash {
                activate(n, &mut next);
            }
            if let Some(child) = n.words.get(*w) {
                activate(child, &mut next);
            }
            if let Some(star) = &n.star {
                activate(star, &mut next);
            }
        }
        std::mem::swap(&mut active, &mut next);
        if active.is_empty() {
            return;
        }
    }
    for n in active {
        n.here.iter().for_each(&mut *f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matching(bindings: &[&str], rk: &str) -> Vec<String> {
        let mut t = TopicTrie::default();
        for b in bindings {
            t.insert(b, b.to_string());
        }
        let mut out = Vec::new();
        t.matches(rk, &mut |v: &String| out.push(v.clone()));
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn rabbitmq_edge_cases() {
        assert_eq!(matching(&["a.b"], "a.b"), ["a.b"]);
        assert!(matching(&["a.b"], "a.b.c").is_empty());
        assert_eq!(matching(&["a.*"], "a.b"), ["a.*"]);
        assert!(matching(&["a.*"], "a").is_empty());
        assert!(matching(&["a.*"], "a.b.c").is_empty());
        assert_eq!(matching(&["a.#"], "a"), ["a.#"]);
        assert_eq!(matching(&["a.#"], "a.b.c"), ["a.#"]);
        assert_eq!(matching(&["#"], ""), ["#"]);
        assert_eq!(matching(&["#"], "x.y"), ["#"]);
        assert!(matching(&["*"], "").is_empty());
        assert_eq!(matching(&["*"], "x"), ["*"]);
        assert_eq!(matching(&["a.#.b"], "a.b"), ["a.#.b"]);
        assert_eq!(matching(&["a.#.b"], "a.x.y.b"), ["a.#.b"]);
        assert_eq!(matching(&["#.b"], "b"), ["#.b"]);
        assert_eq!(matching(&["a.*.#"], "a.b"), ["a.*.#"]);
        assert!(matching(&["a.*.#"], "a").is_empty());
        assert_eq!(matching(&["*.*"], "a."), ["*.*"]);
        assert_eq!(matching(&[""], ""), [""]);
        assert!(matching(&[""], "a").is_empty());
        assert_eq!(matching(&["#.#"], "a"), ["#.#"]);
        assert_eq!(matching(&["a.#.#.b"], "a.b"), ["a.#.#.b"]);
    }

    #[test]
    fn many_hashes_stay_fast() {
        let key = vec!["#"; 50].join(".");
        let rk = vec!["w"; 200].join(".");
        assert_eq!(matching(&[&key], &rk), [key.as_str()]);
        let key = vec!["#.*"; 40].join(".");
        assert_eq!(matching(&[&key], &rk), [key.as_str()]);
        assert!(matching(&[&key], "w.w").is_empty());
    }

    #[test]
    fn remove_prunes() {
        let mut t = TopicTrie::default();
        t.insert("a.*.c", 1);
        t.insert("a.#", 2);
        assert!(t.remove("a.*.c", &1));
        assert!(!t.remove("a.*.c", &1));
        assert!(t.remove("a.#", &2));
        assert!(t.is_empty());
    }
}
