//! The static DAG of a workflow: structural validation, deterministic topological order
//! (declaration order breaks ties), and ancestor/descendant queries for templates and replay.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DagError {
    #[error("step #{index} has an empty id; give every step a non-empty `id`")]
    EmptyId { index: usize },
    #[error("step id `{id}` is declared twice; step ids must be unique")]
    DuplicateId { id: String },
    #[error("step `{step}` needs `{missing}`, which is not a step of this workflow")]
    MissingDependency { step: String, missing: String },
    #[error("step `{step}` lists `{dependency}` twice in `needs`")]
    DuplicateDependency { step: String, dependency: String },
    #[error("step `{step}` needs itself; remove it from its own `needs`")]
    SelfDependency { step: String },
    #[error("the steps form a cycle: {}; break it by removing one of these `needs`", .cycle.join(" -> "))]
    Cycle { cycle: Vec<String> },
}

/// The hasher of the step-id index: SipHash was a twentieth of a 100,000-step parse, for keys a
/// workflow's author chose; foldhash is several times faster and still seeded per process.
type StepHasher = foldhash::fast::RandomState;

/// A validated DAG over step indices (declaration order).
#[derive(Debug, Clone)]
pub struct Dag {
    ids: Vec<String>,
    index: HashMap<String, usize, StepHasher>,
    needs: Vec<Vec<usize>>,
    children: Vec<Vec<usize>>,
    order: Vec<usize>,
}

impl Dag {
    /// Builds and validates a DAG from `(id, needs)` pairs in declaration order.
    pub fn build<'a, I, N>(steps: I) -> Result<Dag, DagError>
    where
        I: IntoIterator<Item = (&'a str, N)>,
        N: IntoIterator<Item = &'a str>,
    {
        let steps = steps.into_iter();
        let (hint, _) = steps.size_hint();
        let mut ids = Vec::with_capacity(hint);
        // Every step's needs in one list, `needs_end[i]` where step `i`'s end: one allocation,
        // not one a step.
        let mut raw_needs: Vec<&str> = Vec::with_capacity(hint);
        let mut needs_end = Vec::with_capacity(hint);
        let mut index = HashMap::with_capacity_and_hasher(hint, StepHasher::default());
        for (i, (id, needs)) in steps.enumerate() {
            if id.is_empty() {
                return Err(DagError::EmptyId { index: i });
            }
            if index.insert(id.to_string(), i).is_some() {
                return Err(DagError::DuplicateId { id: id.to_string() });
            }
            ids.push(id.to_string());
            raw_needs.extend(needs);
            needs_end.push(raw_needs.len());
        }
        let n = ids.len();
        let mut needs = Vec::with_capacity(n);
        let mut children = vec![Vec::new(); n];
        // `needed_by[d] == i` once step `i` has named `d`: a duplicate need is found in one step,
        // however many needs a step has (a join of a million steps is a million of them).
        let mut needed_by = vec![usize::MAX; n];
        let mut start = 0;
        for (i, &end) in needs_end.iter().enumerate() {
            let step_needs = &raw_needs[start..end];
            start = end;
            let mut seen = Vec::with_capacity(step_needs.len());
            for dep in step_needs {
                let Some(&d) = index.get(*dep) else {
                    return Err(DagError::MissingDependency { step: ids[i].clone(), missing: dep.to_string() });
                };
                if d == i {
                    return Err(DagError::SelfDependency { step: ids[i].clone() });
                }
                if needed_by[d] == i {
                    return Err(DagError::DuplicateDependency { step: ids[i].clone(), dependency: dep.to_string() });
                }
                needed_by[d] = i;
                seen.push(d);
                children[d].push(i);
            }
            needs.push(seen);
        }
        let order = kahn(&needs, &children).map_err(|stuck| DagError::Cycle {
            cycle: find_cycle(&needs, &stuck).into_iter().map(|i| ids[i].clone()).collect(),
        })?;
        Ok(Dag { ids, index, needs, children, order })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    pub fn needs(&self, i: usize) -> &[usize] {
        &self.needs[i]
    }

    pub fn children(&self, i: usize) -> &[usize] {
        &self.children[i]
    }

    /// The deterministic topological order: among ready steps, the one declared first runs first.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Whether `ancestor` is reachable from `step` by following `needs`.
    pub fn is_ancestor(&self, ancestor: usize, step: usize) -> bool {
        if self.needs[step].contains(&ancestor) {
            return true;
        }
        // The visited set is sized to the search, not the DAG, so many checks stay cheap.
        let mut seen = std::collections::HashSet::new();
        let mut stack = self.needs[step].clone();
        while let Some(s) = stack.pop() {
            if s == ancestor {
                return true;
            }
            if seen.insert(s) {
                stack.extend_from_slice(&self.needs[s]);
            }
        }
        false
    }

    /// Marks every step reachable downstream from `roots` (the roots included).
    pub fn descendants_closure(&self, roots: impl IntoIterator<Item = usize>) -> Vec<bool> {
        let mut mark = vec![false; self.len()];
        let mut stack: Vec<usize> = roots.into_iter().collect();
        while let Some(s) = stack.pop() {
            if !std::mem::replace(&mut mark[s], true) {
                stack.extend_from_slice(&self.children[s]);
            }
        }
        mark
    }
}

/// Kahn's algorithm with a min-heap on declaration index. On a cycle, returns the steps that
/// never became ready.
fn kahn(needs: &[Vec<usize>], children: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = needs.len();
    let mut indegree: Vec<usize> = needs.iter().map(Vec::len).collect();
    let mut ready: BinaryHeap<Reverse<usize>> = (0..n).filter(|&i| indegree[i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for &c in &children[i] {
            indegree[c] -= 1;
            if indegree[c] == 0 {
                ready.push(Reverse(c));
            }
        }
    }
    if order.len() == n { Ok(order) } else { Err((0..n).filter(|&i| indegree[i] > 0).collect()) }
}

/// One concrete cycle among the steps Kahn's algorithm could not order, as a closed path
/// `a -> b -> … -> a` in `needs` direction, starting at its first-declared step.
fn find_cycle(needs: &[Vec<usize>], stuck: &[usize]) -> Vec<usize> {
    let mut in_stuck = vec![false; needs.len()];
    for &s in stuck {
        in_stuck[s] = true;
    }
    // Every stuck step has a stuck dependency, so walking needs inside the stuck set must repeat.
    let mut pos = vec![usize::MAX; needs.len()];
    let mut path = Vec::new();
    let mut cur = stuck[0];
    loop {
        if pos[cur] != usize::MAX {
            let mut cycle: Vec<usize> = path[pos[cur]..].to_vec();
            // Path follows needs (child -> parent); present it in execution direction.
            cycle.reverse();
            let start = cycle.iter().enumerate().min_by_key(|(_, s)| **s).map(|(i, _)| i).unwrap_or(0);
            cycle.rotate_left(start);
            cycle.push(cycle[0]);
            return cycle;
        }
        pos[cur] = path.len();
        path.push(cur);
        cur = match needs[cur].iter().copied().find(|&d| in_stuck[d]) {
            Some(d) => d,
            None => return path, // unreachable for a true cycle; return what we walked
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn build(steps: &[(&'static str, &[&'static str])]) -> Result<Dag, DagError> {
        Dag::build(steps.iter().map(|(id, needs)| (*id, needs.iter().copied())))
    }

    #[test]
    fn order_is_topological_with_declaration_tie_break() {
        let dag = build(&[("e", &["a", "b"]), ("a", &[]), ("c", &["a"]), ("b", &[])]).unwrap();
        let order: Vec<&str> = dag.order().iter().map(|&i| dag.id(i)).collect();
        assert_eq!(order, ["a", "c", "b", "e"]);
    }

    #[test]
    fn structural_errors_are_named() {
        assert_eq!(build(&[("", &[])]).unwrap_err(), DagError::EmptyId { index: 0 });
        assert_eq!(build(&[("a", &[]), ("a", &[])]).unwrap_err(), DagError::DuplicateId { id: "a".into() });
        assert_eq!(
            build(&[("a", &["zz"])]).unwrap_err(),
            DagError::MissingDependency { step: "a".into(), missing: "zz".into() }
        );
        assert_eq!(build(&[("a", &["a"])]).unwrap_err(), DagError::SelfDependency { step: "a".into() });
        assert_eq!(
            build(&[("a", &[]), ("b", &["a", "a"])]).unwrap_err(),
            DagError::DuplicateDependency { step: "b".into(), dependency: "a".into() }
        );
    }

    #[test]
    fn a_cycle_is_named_in_execution_direction() {
        let err = build(&[("root", &[]), ("x", &["root", "z"]), ("y", &["x"]), ("z", &["y"])]).unwrap_err();
        assert_eq!(err, DagError::Cycle { cycle: vec!["x".into(), "y".into(), "z".into(), "x".into()] });
        assert!(err.to_string().contains("x -> y -> z -> x"));
    }

    proptest! {
        /// Random DAGs (edges only to earlier-declared steps, then shuffled declaration): the order
        /// is a permutation, respects every edge, and is the lexicographically smallest such order.
        #[test]
        fn order_respects_edges(n in 1usize..40, edges in prop::collection::vec((0usize..40, 0usize..40), 0..120), perm_seed in any::<u64>()) {
            let mut needs: Vec<Vec<usize>> = vec![Vec::new(); n];
            for (a, b) in edges {
                let (a, b) = (a % n, b % n);
                if a < b && !needs[b].contains(&a) { needs[b].push(a); }
            }
            // Declare steps in a pseudo-random order so the tie-break is exercised.
            let mut decl: Vec<usize> = (0..n).collect();
            let mut s = perm_seed;
            for i in (1..n).rev() { s = s.wrapping_mul(6364136223846793005).wrapping_add(1); decl.swap(i, (s >> 33) as usize % (i + 1)); }
            let names: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
            let dag = Dag::build(decl.iter().map(|&i| (names[i].as_str(), needs[i].iter().map(|&d| names[d].as_str())))).unwrap();
            let mut pos = vec![0; n];
            for (p, &i) in dag.order().iter().enumerate() { pos[i] = p; }
            let mut sorted = dag.order().to_vec(); sorted.sort();
            prop_assert_eq!(sorted, (0..n).collect::<Vec<_>>());
            for i in 0..n { for &d in dag.needs(i) { prop_assert!(pos[d] < pos[i]); } }
            // Greedy minimality: at each position the chosen step is the smallest ready one.
            let mut done = vec![false; n];
            for &i in dag.order() {
                let smallest_ready = (0..n).find(|&j| !done[j] && dag.needs(j).iter().all(|&d| done[d])).unwrap();
                prop_assert_eq!(i, smallest_ready);
                done[i] = true;
            }
        }

        #[test]
        fn a_back_edge_is_always_reported_as_a_cycle(n in 2usize..30) {
            let names: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
            let steps = (0..n).map(|i| {
                let dep = if i == 0 { n - 1 } else { i - 1 };
                (names[i].as_str(), vec![names[dep].as_str()])
            });
            let err = Dag::build(steps).unwrap_err();
            let DagError::Cycle { cycle } = err else { panic!("expected a cycle") };
            prop_assert_eq!(cycle.len(), n + 1);
            prop_assert_eq!(cycle.first(), cycle.last());
        }
    }
}
