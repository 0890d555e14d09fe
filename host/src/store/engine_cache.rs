//! What a transaction has read of the database's catalog must be found again in its cache.
//!
//! SurrealDB 3.3.5 keeps what a transaction read of the catalog (table definitions, the list of tables,
//! which tables a `REFERENCE` field can point at) in a cache of the transaction, stored under a key and
//! found by a lookup whose hash must equal the key's. Its lookup type listed five variants in another
//! order than its key type, and the derived hashes include the variant's index: entries of those five
//! were stored and never found again. One of them is the summary a `DELETE` consults for every record
//! it removes, so each deleted record read every table and field definition of the database anew
//! (~0.3 ms a record with Herald's schema: a delete cost four times an update). Herald builds the
//! datastore crate with the order fixed (`host/vendor/surrealdb-datastore/HERALD.md`); this test
//! stores an entry under every variant the fix touches and fails when a lookup does not find it.

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use surrealdb_datastore::cache::tx::{Entry, Lookup, TransactionCache};
    use surrealdb_datastore::catalog::{DatabaseId, NamespaceId};

    #[test]
    fn the_transaction_cache_finds_what_it_stored() {
        let (ns, db) = (NamespaceId(1), DatabaseId(2));
        let lookups = [
            ("tables", Lookup::Tbs(ns, db)),
            ("reference targets", Lookup::DbReferenceTargets(ns, db)),
            ("sequences", Lookup::Sqs(ns, db)),
            ("table by id", Lookup::Tb(ns, db, "contact")),
            ("table by name", Lookup::TbByName("herald", "main", "contact")),
            // Variants the published order already got right, as a control.
            ("fields", Lookup::Fds(ns, db, "contact")),
            ("events", Lookup::Evs(ns, db, "contact")),
        ];
        let mut lost = Vec::new();
        for (what, lookup) in lookups {
            let cache = TransactionCache::new(512);
            let again = clone_lookup(&lookup);
            cache.insert(lookup, Entry::Any(Arc::new(what)));
            let found = cache.get(&again).map(|e| match e {
                Entry::Any(v) => v.downcast_ref::<&str>().copied(),
                _ => None,
            });
            if found != Some(Some(what)) {
                lost.push(what);
            }
        }
        assert!(lost.is_empty(), "stored in the transaction cache and not found again: {lost:?}");
    }

    /// `Lookup` is not `Clone`; the variants this test uses, rebuilt.
    fn clone_lookup<'a>(l: &Lookup<'a>) -> Lookup<'a> {
        match l {
            Lookup::Tbs(a, b) => Lookup::Tbs(*a, *b),
            Lookup::DbReferenceTargets(a, b) => Lookup::DbReferenceTargets(*a, *b),
            Lookup::Sqs(a, b) => Lookup::Sqs(*a, *b),
            Lookup::Tb(a, b, c) => Lookup::Tb(*a, *b, c),
            Lookup::TbByName(a, b, c) => Lookup::TbByName(a, b, c),
            Lookup::Fds(a, b, c) => Lookup::Fds(*a, *b, c),
            Lookup::Evs(a, b, c) => Lookup::Evs(*a, *b, c),
            _ => unreachable!("not used by this test"),
        }
    }
}
