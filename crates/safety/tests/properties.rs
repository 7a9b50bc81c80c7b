//! Property tests: normalization is idempotent; appending a denial never
//! raises a level; appending an imminent phrase never lowers one.

use opencouch_safety::{classify, normalize};
use proptest::prelude::*;

const FRAGMENTS: &[&str] = &[
    "i feel so tired",
    "work is killing me",
    "i can't do this anymore",
    "i want to die",
    "kms",
    "my friend said she wants to kill herself",
    "i'm dead 😂",
    "i feel hopeless",
    "i planned it all out",
    "i used to want to die",
    "i'm doing better now",
    "tonight",
    "i have pills",
    "i wish i could disappear",
    "hello",
    "i took 2 pills at 10pm",
    "I’M SOOOO DONE",
    "su1c1d4l",
    "no",
    "i keep thinking about it",
];

const DENIALS: &[&str] = &[
    "I'm not suicidal.",
    "I'm safe, just venting.",
    "I would never hurt myself.",
];
const IMMINENT: &[&str] = &[
    "I'm going to kill myself tonight.",
    "I have been stockpiling my pills.",
    "This is my last message.",
];

fn message() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 1..4).prop_map(|v| v.join(". "))
}

proptest! {
    #[test]
    fn normalize_is_idempotent(s in "\\PC{0,60}") {
        let once = normalize(&s);
        prop_assert_eq!(normalize(&once), once.clone());
    }

    #[test]
    fn normalize_is_idempotent_on_fragments(m in message(), noise in "[a-z0-9 '*!@$.]{0,20}") {
        let s = format!("{m} {noise}");
        let once = normalize(&s);
        prop_assert_eq!(normalize(&once), once.clone());
    }

    #[test]
    fn appending_a_denial_never_raises(m in message(), d in prop::sample::select(DENIALS)) {
        let before = classify(&[], &m).assessment.level;
        let after = classify(&[], &format!("{m}. {d}")).assessment.level;
        prop_assert!(after <= before, "{m:?} + {d:?}: {before:?} -> {after:?}");
    }

    #[test]
    fn appending_an_imminent_phrase_never_lowers(m in message(), i in prop::sample::select(IMMINENT)) {
        let before = classify(&[], &m).assessment.level;
        let after = classify(&[], &format!("{m}. {i}")).assessment.level;
        prop_assert!(after >= before, "{m:?} + {i:?}: {before:?} -> {after:?}");
        prop_assert_eq!(after.get(), 3);
    }
}

#[test]
fn normalize_is_idempotent_when_a_pass_gives_a_look_alike_word_a_latin_letter() {
    // Found by the property above: "¨" folds to a space, "$" to "s", and the
    // Canadian syllabic "ᐯ" is a look-alike of "v" that the first pass left
    // alone (its word had no Latin letter yet).
    for s in ["ῲ¨ᐯ$", "ω ᐯ$", "ᐯ$"] {
        let once = normalize(s);
        assert_eq!(normalize(&once), once, "{s:?}");
    }
}
