//! The safety plan through the router: `GET/PUT/DELETE /api/safety-plan`
//! (shape, bounds, a 422 naming the field, per-owner), `GET /api/sos`
//! (the lines for anyone, the plan for its owner, no model), and the plan
//! in a crisis reply, the export and forget-me.
#![allow(clippy::unwrap_used)]

mod common;

use axum::http::{Method, StatusCode};
use common::{call, fixture, local_fixture};
use serde_json::{Value, json};

const GET: Method = Method::GET;
const PUT: Method = Method::PUT;
const POST: Method = Method::POST;
const DELETE: Method = Method::DELETE;

fn plan() -> Value {
    json!({
        "warning_signs": ["I stop answering messages"],
        "coping": ["  cold water on my face ", "the 4-7-8 breath"],
        "people": [{"name": "my sister Wilhelmina", "phone": "+44 7700 900123"}],
        "professionals": [{"name": "Dr Okafor"}],
        "reasons_to_live": ["my dog Pretzel"]
    })
}

#[tokio::test]
async fn put_get_delete_round_trip_per_owner() {
    let f = fixture().await;
    let (status, v) = call(&f.app, GET, "/api/safety-plan", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["coping"], json!([]));
    assert_eq!(v["updated_at"], Value::Null);

    let body = plan().to_string();
    let (status, v) = call(&f.app, PUT, "/api/safety-plan", Some(&f.alice), Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(
        v["coping"],
        json!(["cold water on my face", "the 4-7-8 breath"])
    );
    assert!(v["updated_at"].is_string());
    assert_eq!(v["safe_environment"], json!([]));

    let (_, got) = call(&f.app, GET, "/api/safety-plan", Some(&f.alice), None).await;
    assert_eq!(got["people"][0]["phone"], "+44 7700 900123");
    // Bob sees only his own (none).
    let (_, bob) = call(&f.app, GET, "/api/safety-plan", Some(&f.bob), None).await;
    assert_eq!(bob["people"], json!([]));
    // Without a token: 401.
    let (status, _) = call(&f.app, GET, "/api/safety-plan", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, v) = call(&f.app, DELETE, "/api/safety-plan", Some(&f.alice), None).await;
    assert_eq!(
        (status, v["deleted"].clone()),
        (StatusCode::OK, json!(true))
    );
    let (_, v) = call(&f.app, DELETE, "/api/safety-plan", Some(&f.alice), None).await;
    assert_eq!(v["deleted"], json!(false));
    let (_, got) = call(&f.app, GET, "/api/safety-plan", Some(&f.alice), None).await;
    assert_eq!(got["coping"], json!([]));
}

#[tokio::test]
async fn bad_plans_are_422_naming_the_field_and_change_nothing() {
    let f = fixture().await;
    let body = plan().to_string();
    call(&f.app, PUT, "/api/safety-plan", Some(&f.alice), Some(&body)).await;
    let long = "x".repeat(501);
    let cases = [
        (json!({"coping": ["ok", "  "]}), "coping[1]"),
        (json!({"reasons_to_live": [long]}), "reasons_to_live[0]"),
        (json!({"warning_signs": vec!["x"; 21]}), "warning_signs"),
        (
            json!({"people": [{"name": "Jo", "phone": "ring me"}]}),
            "people[0].phone",
        ),
        (
            json!({"professionals": [{"name": ""}]}),
            "professionals[0].name",
        ),
    ];
    for (bad, field) in cases {
        let (status, v) = call(
            &f.app,
            PUT,
            "/api/safety-plan",
            Some(&f.alice),
            Some(&bad.to_string()),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {v}");
        assert_eq!(v["code"], "invalid_input");
        let message = v["message"].as_str().unwrap();
        assert!(message.contains(field), "{field}: {message}");
        assert!(!message.contains("ring me"), "never echoes the value");
    }
    // Shape errors: unknown fields, wrong types.
    for bad in [
        json!({"hobbies": ["x"]}),
        json!({"coping": "a walk"}),
        json!({"people": [{"name": "Jo", "mobile": "1"}]}),
    ] {
        let (status, v) = call(
            &f.app,
            PUT,
            "/api/safety-plan",
            Some(&f.alice),
            Some(&bad.to_string()),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {v}");
    }
    let (status, _) = call(&f.app, PUT, "/api/safety-plan", Some(&f.alice), Some("{")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Nothing changed.
    let (_, got) = call(&f.app, GET, "/api/safety-plan", Some(&f.alice), None).await;
    assert_eq!(got["reasons_to_live"], json!(["my dog Pretzel"]));
}

#[tokio::test]
async fn sos_shows_lines_to_anyone_and_the_plan_to_its_owner() {
    let f = fixture().await;
    let body = plan().to_string();
    call(&f.app, PUT, "/api/safety-plan", Some(&f.alice), Some(&body)).await;

    // No token: the verified lines, no plan.
    let (status, v) = call(&f.app, GET, "/api/sos?country=GB", None, None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["plan_status"], "not_available");
    assert_eq!(v["plan"], Value::Null);
    assert_eq!(v["country_code"], "GB");
    assert!(!v["resources"].as_array().unwrap().is_empty());
    assert!(!v["text"].as_str().unwrap().contains("Wilhelmina"));

    // A wrong token: still the lines.
    let (status, v) = call(&f.app, GET, "/api/sos", Some("oc_wrong"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["plan_status"], "not_available");
    assert!(v["text"].as_str().unwrap().contains("findahelpline"), "{v}");

    // The owner: the plan first, then the lines, their number marked.
    let (status, v) = call(&f.app, GET, "/api/sos?country=gb", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["plan_status"], "shown");
    let text = v["text"].as_str().unwrap();
    let own = text
        .find("my sister Wilhelmina (your number: +44 7700 900123)")
        .unwrap();
    let lines = text.find("Verified crisis lines").unwrap();
    assert!(own < lines, "{text}");
    assert_eq!(v["plan"]["reasons_to_live"], json!(["my dog Pretzel"]));

    // Bob has none.
    let (_, v) = call(&f.app, GET, "/api/sos", Some(&f.bob), None).await;
    assert_eq!(v["plan_status"], "none");

    // A bad country is a clear error.
    let (status, v) = call(&f.app, GET, "/api/sos?country=Britain", None, None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["code"], "invalid_country");
}

#[tokio::test]
async fn a_crisis_reply_shows_the_plan_before_the_lines_and_the_transcript_does_not_keep_it() {
    let f = fixture().await;
    let body = plan().to_string();
    call(&f.app, PUT, "/api/safety-plan", Some(&f.alice), Some(&body)).await;
    let msg = json!({"message": "I want to kill myself tonight, I'm in London", "thread_id": "t1"});
    let (status, v) = call(
        &f.app,
        POST,
        "/api/chat",
        Some(&f.alice),
        Some(&msg.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["route"], "crisis");
    let reply = v["response_text"].as_str().unwrap();
    let own = reply.find("From your own safety plan").expect(reply);
    assert!(reply.contains("my sister Wilhelmina (your number: +44 7700 900123)"));
    let first_line = v["resources"][0]["name"].as_str().unwrap();
    assert!(own < reply.find(first_line).unwrap(), "{reply}");
    assert!(
        !reply.contains("I stop answering"),
        "warning signs are not for the moment of crisis"
    );

    // The stored transcript keeps a placeholder, not the plan.
    let (_, hist) = call(&f.app, GET, "/api/threads/t1/history", Some(&f.alice), None).await;
    let stored = hist.to_string();
    assert!(!stored.contains("Wilhelmina"), "{stored}");
    assert!(stored.contains("safety plan was shown here"), "{stored}");

    // Bob's crisis reply has no plan.
    let (_, v) = call(
        &f.app,
        POST,
        "/api/chat",
        Some(&f.bob),
        Some(&msg.to_string()),
    )
    .await;
    assert!(
        !v["response_text"]
            .as_str()
            .unwrap()
            .contains("From your own safety plan")
    );
}

#[tokio::test]
async fn the_plan_is_exported_and_forgotten() {
    let f = fixture().await;
    let body = plan().to_string();
    call(&f.app, PUT, "/api/safety-plan", Some(&f.alice), Some(&body)).await;
    let (status, v) = call(&f.app, GET, "/api/export", Some(&f.alice), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v["safety_plan"]["reasons_to_live"],
        json!(["my dog Pretzel"])
    );
    let (_, md) = call(&f.app, GET, "/api/export?format=md", Some(&f.alice), None).await;
    let md = md.as_str().unwrap();
    assert!(md.contains("## Safety plan"), "{md}");
    assert!(
        md.contains("my sister Wilhelmina (+44 7700 900123)"),
        "{md}"
    );

    let (_, prep) = call(&f.app, POST, "/api/forget-me", Some(&f.alice), None).await;
    assert_eq!(prep["counts"]["safety_plan"], 1, "{prep}");
    let confirm = json!({"token": prep["token"]}).to_string();
    let (status, done) = call(
        &f.app,
        POST,
        "/api/forget-me/confirm",
        Some(&f.alice),
        Some(&confirm),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["deleted"]["safety_plan"], 1);
}

#[tokio::test]
async fn local_mode_sos_shows_the_local_plan() {
    let (app, _state, _rt) = local_fixture();
    let body = json!({"coping": ["call the allotment friends"]}).to_string();
    let (status, _) = call(&app, PUT, "/api/safety-plan", None, Some(&body)).await;
    assert_eq!(status, StatusCode::OK);
    let (_, v) = call(&app, GET, "/api/sos", None, None).await;
    assert_eq!(v["plan_status"], "shown");
    assert!(v["text"].as_str().unwrap().contains("allotment"));
}
