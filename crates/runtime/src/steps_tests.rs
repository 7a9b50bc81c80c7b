//! Table tests of the turn's pure steps.

use super::*;
use opencouch_core::{Confidence, CrisisAssessment};
use opencouch_safety::episode::{CloseReason, ReplyKind};

fn lvl(n: u8) -> CrisisLevel {
    CrisisLevel::new(n).unwrap()
}

fn decision(close: Option<CloseReason>, calm: u32, max: u8) -> FollowUpDecision {
    FollowUpDecision {
        kind: ReplyKind::Other,
        own_level: lvl(0),
        close,
        calm_turns: calm,
        max_level: lvl(max),
        floor: None,
    }
}

#[test]
fn session_window_keeps_only_this_session() {
    let history: Vec<Message> = (0..6).map(|i| Message::user(format!("m{i}"))).collect();
    // (messages in the thread, first index of the session, expected first kept)
    let cases = [
        (10, 4, Some("m0")),
        (10, 8, Some("m4")),
        (10, 10, None),
        (3, 9, None),
    ];
    for (count, start, first) in cases {
        let w = session_window(&history, count, start);
        assert_eq!(
            w.first().map(|m| m.content.as_str()),
            first,
            "{count} {start}"
        );
    }
}

#[test]
fn triage_runs_only_at_level_zero_outside_a_closing_episode() {
    let closing = decision(Some(CloseReason::SafetyStatement), 0, 2);
    let held = decision(None, 1, 2);
    let cases = [
        (0, None, true),
        (1, None, false),
        (2, None, false),
        (0, Some(&held), true),
        (0, Some(&closing), false),
    ];
    for (level, d, want) in cases {
        assert_eq!(needs_triage(lvl(level), d), want, "{level} {d:?}");
    }
}

#[test]
fn closing_acknowledgement_comes_first() {
    let closing = decision(Some(CloseReason::CalmStretch), 0, 2);
    let text = with_closing_acknowledgement("  Reply.", Some(&closing));
    let ack = opencouch_safety::plan::episode_closed_acknowledgement();
    assert_eq!(text, format!("{ack}\n\nReply."));
    assert_eq!(with_closing_acknowledgement("Reply.", None), "Reply.");
}

#[test]
fn episode_table() {
    let now = Utc::now();
    let facts = |level: u8, own: u8, country: Option<&str>| EpisodeTurnFacts {
        level: lvl(level),
        own_level: lvl(own),
        country: country.map(str::to_owned),
        now,
        turn_count: 7,
    };
    let open = CrisisEpisode::open(now, 3, lvl(2));
    let closing = decision(Some(CloseReason::SafetyStatement), 0, 2);
    let held = decision(None, 1, 3);

    // No episode, level 0/1: none opens.
    assert_eq!(next_episode(None, None, facts(0, 0, None)), None);
    assert_eq!(next_episode(None, None, facts(1, 1, None)), None);
    // A level ≥ 2 turn opens one at this turn, at the higher level.
    let opened = next_episode(None, None, facts(2, 3, Some("GB"))).unwrap();
    assert_eq!(
        (
            opened.opened_turn,
            opened.max_level,
            opened.country_code.as_deref()
        ),
        (7, lvl(3), Some("GB"))
    );
    // Closing removes it.
    assert_eq!(
        next_episode(Some(open.clone()), Some(&closing), facts(2, 0, None)),
        None
    );
    // A follow-up updates the counters and keeps the known country unless a
    // new one is named.
    let mut with_country = open.clone();
    with_country.country_code = Some("IE".into());
    let next = next_episode(Some(with_country.clone()), Some(&held), facts(2, 0, None)).unwrap();
    assert_eq!(
        (
            next.max_level,
            next.calm_turns,
            next.follow_ups,
            next.country_code.as_deref()
        ),
        (lvl(3), 1, 1, Some("IE"))
    );
    let next = next_episode(Some(with_country), Some(&held), facts(2, 0, Some("GB"))).unwrap();
    assert_eq!(next.country_code.as_deref(), Some("GB"));
    // An open episode with no decision (not assessed in-episode) is kept.
    assert_eq!(
        next_episode(Some(open.clone()), None, facts(0, 0, None)),
        Some(open)
    );
}

#[test]
fn session_row_table() {
    let now = Utc::now();
    // (messages before, soft limit, style, expected action, rotate)
    let cases = [
        (
            0,
            240,
            ResponseStyle::Supportive,
            SessionAction::None,
            false,
        ),
        (
            238,
            240,
            ResponseStyle::Supportive,
            SessionAction::SuggestEndSession,
            true,
        ),
        (
            10,
            240,
            ResponseStyle::Closing,
            SessionAction::SuggestEndSession,
            false,
        ),
    ];
    for (before, limit, style, want, rotate) in cases {
        let mut row = ActiveSession::start("t1", now, 0);
        let action = update_session_row(&mut row, now, lvl(2), before, limit, style);
        assert_eq!(action, want, "{before} {style:?}");
        assert_eq!(row.rotate_after_this_turn, rotate);
        assert_eq!(row.max_crisis_level, 2);
        assert_eq!(row.last_active_at, Some(now));
    }
}

#[test]
fn crisis_levels_always_answer_on_the_crisis_route() {
    let input = AgentInput::new("t1", "hello");
    for (level, want_route, want_type) in [
        (0, Route::Therapeutic, ResponseType::Therapeutic),
        (1, Route::Therapeutic, ResponseType::Therapeutic),
        (2, Route::Crisis, ResponseType::Crisis),
        (3, Route::Crisis, ResponseType::Crisis),
    ] {
        let verdict =
            GateVerdict::for_tests(CrisisAssessment::new(lvl(level), Confidence::High, "test"));
        let plan = crate::plan::resolve(&verdict, None, false);
        // Force a non-crisis plan to show that the verdict wins.
        let plan = RoutePlan {
            kind: crate::plan::PlanKind::Therapeutic,
            ..plan
        };
        let outcome = SpecialistOutcome {
            text: "Reply.".into(),
            ..Default::default()
        };
        let a = Answered {
            input: &input,
            verdict: &verdict,
            plan: &plan,
            triage: None,
            outcome: &outcome,
            now: Utc::now(),
        };
        let out = output(&a, SessionAction::None, Diagnostics::new(), true, true);
        assert_eq!(
            (out.route, out.response_type),
            (want_route, want_type),
            "{level}"
        );
        assert_eq!(out.mode, out.response_style);
        assert_eq!(out.mode_type, opencouch_core::ModeType::of_route(out.route));
        let want_source = if level > 0 {
            opencouch_core::ModeSource::CrisisGate
        } else {
            opencouch_core::ModeSource::Default
        };
        assert_eq!(out.mode_source, want_source, "{level}");
        assert_eq!(
            out.should_persist_memory,
            level < 2,
            "a crisis turn never feeds memory"
        );
        let msgs = transcript_messages(&a, Utc::now());
        assert_eq!(msgs[0].crisis_level, Some(level));
        assert_eq!(msgs[1].content, "Reply.");
    }
}
