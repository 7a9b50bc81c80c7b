//! The store's memory columns mean what the store's record says: a fact's
//! `last_referenced_at` and `dormant_at` reach the store as the fact states
//! them (an adapter once wrote the update time into `last_referenced_at`
//! and always `dormant_at: None`), and come back unchanged.
#![allow(clippy::unwrap_used)]

use chrono::{Duration, TimeZone, Utc};
use opencouch_memory::backend::{decode_fact, fact_record, upsert};
use opencouch_memory::types::{NewFact, WriteTiming};
use opencouch_memory::{EntityRef, EntityType, FactCategory, MemoryKind, Predicate, SemanticFact};
use opencouch_store::Stores;

fn fact(object: &str) -> SemanticFact {
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 9, 0, 0).unwrap();
    SemanticFact::new(
        NewFact {
            category: FactCategory::Relationship,
            subject: EntityRef::user(),
            predicate: Predicate::Knows,
            object: EntityRef::new(EntityType::Person, object).unwrap(),
            evidence_quote: format!("I know {object}"),
            confidence: 0.9,
            source_session_id: None,
            source_turn_index: None,
            write_timing: WriteTiming::Promotion,
            write_reason: "test".into(),
        },
        t0,
    )
    .unwrap()
}

#[tokio::test]
async fn reference_and_dormancy_times_are_stored_as_the_record_states_them() {
    let stores = Stores::in_memory();
    let store = stores.memory.as_ref();
    let fresh = fact("Sam");
    let mut used = fact("Ana");
    used.last_referenced_at = Some(used.created_at + Duration::hours(3));
    let mut retired = fact("Lee");
    retired.dormant_at = Some(retired.created_at + Duration::days(2));
    for f in [&fresh, &used, &retired] {
        upsert(store, &fact_record("o", f, None)).await.unwrap();
    }
    let rows = stores
        .memory
        .list("o", opencouch_store::MemoryKind::Semantic)
        .await
        .unwrap();
    let row = |id: &str| rows.iter().find(|r| r.id == id).unwrap();
    // Never referenced is "never", not the creation or update time.
    assert_eq!(row(&fresh.id).last_referenced_at, None);
    assert_eq!(row(&fresh.id).dormant_at, None);
    assert_eq!(row(&used.id).last_referenced_at, used.last_referenced_at);
    assert_eq!(row(&retired.id).dormant_at, retired.dormant_at);
    // And the facts decoded back from the records unchanged.
    let back = store.list("o", MemoryKind::Semantic).await.unwrap();
    let rec = |id: &str| decode_fact(back.iter().find(|r| r.id == id).unwrap()).unwrap();
    assert_eq!(rec(&used.id).last_referenced_at, used.last_referenced_at);
    assert_eq!(rec(&retired.id).dormant_at, retired.dormant_at);
    assert_eq!(rec(&fresh.id).last_referenced_at, None);
}
