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

    const NS: NamespaceId = NamespaceId(1);
    const DB: DatabaseId = DatabaseId(2);

    /// Builds one lookup; called twice (`Lookup` is not `Clone`): to store under and to find with.
    type Build = fn() -> Lookup<'static>;

    #[test]
    fn the_transaction_cache_finds_what_it_stored() {
        let lookups: [(&str, Build); 7] = [
            ("tables", || Lookup::Tbs(NS, DB)),
            ("reference targets", || Lookup::DbReferenceTargets(NS, DB)),
            ("sequences", || Lookup::Sqs(NS, DB)),
            ("table by id", || Lookup::Tb(NS, DB, "contact")),
            ("table by name", || Lookup::TbByName("herald", "main", "contact")),
            // Variants the published order already got right, as a control.
            ("fields", || Lookup::Fds(NS, DB, "contact")),
            ("events", || Lookup::Evs(NS, DB, "contact")),
        ];
        let mut lost = Vec::new();
        for (what, lookup) in lookups {
            let cache = TransactionCache::new(512);
            cache.insert(lookup(), Entry::Any(Arc::new(what)));
            let found = cache.get(&lookup()).map(|e| match e {
                Entry::Any(v) => v.downcast_ref::<&str>().copied(),
                _ => None,
            });
            if found != Some(Some(what)) {
                lost.push(what);
            }
        }
        assert!(lost.is_empty(), "stored in the transaction cache and not found again: {lost:?}");
    }
}
