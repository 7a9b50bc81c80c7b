//! Shared test fixture: one explicit start request and one completing
//! reply per step for each of the 13 exercises. Used by the exercise
//! crate's walkthrough and by the runtime's end-to-end walk.

/// (exercise id, an explicit request that starts it, one completing reply per step)
pub const WALKS: &[(&str, &str, &[&str])] = &[
    (
        "grounding_5_4_3_2_1",
        "can we do 5-4-3-2-1?",
        &[
            "I can see a lamp, a mug, the window and my phone",
            "the fridge humming and cars outside",
            "my feet on the floor, the soft blanket",
            "coffee",
            "mint toothpaste",
        ],
    ),
    (
        "grounding_box_breathing",
        "let's do box breathing",
        &["done", "ok", "next", "finished"],
    ),
    (
        "grounding_stop_technique",
        "walk me through the STOP skill",
        &[
            "ok, I've paused",
            "done",
            "my chest feels tight and I'm angry",
            "I'll step outside and drink some water",
        ],
    ),
    (
        "grounding_muscle_relaxation",
        "help me with progressive muscle relaxation",
        &["done", "next step", "ok did it", "move on", "finished"],
    ),
    (
        "thought_work_simple_record",
        "can we try a thought record",
        &[
            "my friend didn't text back all day",
            "she must be angry with me",
            "she said last week she has a busy deadline",
            "she's probably just busy and it isn't about me",
        ],
    ),
    (
        "thought_work_behavioral_experiment",
        "I want to try a behavioral experiment",
        &[
            "if I speak up in meetings people will think I'm stupid",
            "ask one question in tomorrow's team meeting",
            "someone will roll their eyes",
            "I'll notice how people actually respond and write it down",
        ],
    ),
    (
        "thought_work_continuum",
        "guide me through the belief continuum",
        &[
            "I'm a failure",
            "someone who never tried anything and gave up on everyone",
            "someone who fails at every single thing they ever do",
            "maybe 40",
            "it feels less absolute and a bit softer",
        ],
    ),
    (
        "self_compassion_break",
        "let's try the self-compassion break",
        &["ok", "yes, done", "it's okay to struggle sometimes"],
    ),
    (
        "emotion_regulation_improve",
        "can we do the IMPROVE skill",
        &[
            "ok I can picture the beach",
            "my little sister",
            "drinking a glass of water",
            "I can get through the next hour",
        ],
    ),
    (
        "emotion_regulation_gratitude",
        "let's do a gratitude exercise",
        &[
            "my cat, a warm shower and a text from my mum",
            "my cat keeps me company when I'm alone",
            "a bit lighter",
        ],
    ),
    (
        "defusion_leaves_on_stream",
        "walk me through leaves on a stream",
        &[
            "I'm not good enough",
            "done, it's on the leaf",
            "ok",
            "it felt a little lighter",
            "spending time with my kids this evening",
        ],
    ),
    (
        "defusion_values_compass",
        "I want to try the values compass",
        &[
            "relationships",
            "I want to be a caring and present friend",
            "about a 5",
            "message my friend Sam this week",
        ],
    ),
    (
        "behavioral_activation_tiny_action",
        "help me with a tiny action",
        &[
            "open the window",
            "after lunch in the kitchen",
            "I might forget, so I'll set a reminder",
            "8",
        ],
    ),
];
