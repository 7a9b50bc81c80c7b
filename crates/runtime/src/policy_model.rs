//! The write policy's model side in hybrid mode: [`LlmPolicyModel`]
//! implements the memory crate's [`PolicyModel`] with the control-tier chat
//! model (structured output with schema validation and one repair attempt),
//! the prompts of `opencouch_prompts::memory`, and a bound on every call.
//!
//! Only counts and error kinds are logged, never text.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use opencouch_core::{Message, ModelTier};
use opencouch_llm::{ChatMessage, ChatModel, LlmError};
use opencouch_memory::assist::{
    ExtractionReply, FactReconcileReply, PolicyModel, PolicyModelError, PreferenceReply,
    RuleDecision,
};
use opencouch_memory::{ProceduralRule, SemanticFact};
use opencouch_prompts::memory::{
    MemoryPrompt, extraction_input, memory_prompt, preference_input, reconcile_input,
};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

/// The policy model over a chat model.
pub struct LlmPolicyModel {
    model: Arc<dyn ChatModel>,
    timeout: Duration,
}

impl LlmPolicyModel {
    /// A policy model; `timeout` bounds each call (repair included).
    pub fn new(model: Arc<dyn ChatModel>, timeout: Duration) -> Self {
        LlmPolicyModel { model, timeout }
    }

    async fn ask<T>(&self, prompt: MemoryPrompt, user: String) -> Result<T, PolicyModelError>
    where
        T: DeserializeOwned + JsonSchema + 'static,
    {
        let system = memory_prompt(prompt).map_err(|e| {
            tracing::error!(error = %e, "memory prompt unavailable");
            PolicyModelError::Unavailable("prompt")
        })?;
        let messages = vec![ChatMessage::system(system), ChatMessage::user(user)];
        let call = opencouch_llm::structured_with::<T, _>(
            self.model.as_ref(),
            ModelTier::Control,
            messages,
        );
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(s)) => Ok(s.value),
            Ok(Err(LlmError::InvalidStructuredOutput { .. })) => Err(PolicyModelError::Invalid),
            Ok(Err(e)) => Err(PolicyModelError::Unavailable(e.kind())),
            Err(_) => Err(PolicyModelError::Timeout),
        }
    }
}

/// One fact as a line for the reconciler (quoted data).
pub(crate) fn fact_line(f: &SemanticFact) -> String {
    format!(
        "category={} subject={}:{} predicate={} object={}:{} evidence=\"{}\"",
        f.category,
        f.subject.entity_type,
        f.subject.identifier,
        f.predicate,
        f.object.entity_type,
        f.object.identifier,
        f.evidence_quote
    )
}

#[async_trait]
impl PolicyModel for LlmPolicyModel {
    async fn extract(
        &self,
        history: &[Message],
        message: &str,
    ) -> Result<ExtractionReply, PolicyModelError> {
        self.ask(MemoryPrompt::Extract, extraction_input(history, message))
            .await
    }

    async fn reconcile_fact(
        &self,
        slot: &[&SemanticFact],
        new: &SemanticFact,
    ) -> Result<FactReconcileReply, PolicyModelError> {
        let saved: Vec<String> = slot.iter().map(|f| fact_line(f)).collect();
        self.ask(
            MemoryPrompt::ReconcileFacts,
            reconcile_input(&saved, &fact_line(new)),
        )
        .await
    }

    async fn reconcile_rule(
        &self,
        active: &[&ProceduralRule],
        new: &ProceduralRule,
    ) -> Result<RuleDecision, PolicyModelError> {
        let saved: Vec<String> = active.iter().map(|r| r.rule.clone()).collect();
        self.ask(
            MemoryPrompt::ReconcileRules,
            reconcile_input(&saved, &new.rule),
        )
        .await
    }

    async fn normalize_preference(&self, text: &str) -> Result<PreferenceReply, PolicyModelError> {
        self.ask(MemoryPrompt::NormalizePreference, preference_input(text))
            .await
    }
}

#[cfg(test)]
mod tests {
    use opencouch_memory::policy::PolicyAction;
    use opencouch_memory::{EntityType, FactCategory, Predicate};
    use opencouch_prompts::memory::{MemoryPrompt, memory_prompt};

    /// The extractor prompt must explain every value the schema allows, so
    /// adding a category, entity type, predicate or action forces a prompt
    /// update; and it must name every field of the reply.
    #[test]
    fn extract_prompt_matches_the_schema() {
        let body = memory_prompt(MemoryPrompt::Extract).expect("prompt");
        let flat = body.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut names: Vec<String> = Vec::new();
        names.extend(FactCategory::ALL.iter().map(|c| c.as_str().to_owned()));
        names.extend(EntityType::ALL.iter().map(|c| c.as_str().to_owned()));
        names.extend(Predicate::ALL.iter().map(|c| c.as_str().to_owned()));
        for a in [
            PolicyAction::CommitNow,
            PolicyAction::CommitAtSessionEnd,
            PolicyAction::RequireRepetition,
            PolicyAction::Drop,
        ] {
            names.push(
                serde_json::to_value(a)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .expect("action name"),
            );
        }
        let schema =
            opencouch_llm::strict_schema_for::<opencouch_memory::assist::ExtractionReply>();
        let mut fields: Vec<String> = Vec::new();
        collect_properties(&schema, &mut fields);
        assert!(fields.len() >= 10, "{fields:?}");
        names.extend(fields);
        for n in names {
            assert!(
                flat.contains(&format!("`{n}`")),
                "extract prompt does not mention `{n}`"
            );
        }
        assert!(
            flat.contains(&format!(
                "at most {} characters",
                opencouch_memory::types::MAX_QUOTE_CHARS
            )),
            "quote limit"
        );
    }

    fn collect_properties(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::Object(props)) = map.get("properties") {
                    for k in props.keys() {
                        if !out.contains(k) {
                            out.push(k.clone());
                        }
                    }
                }
                map.values().for_each(|x| collect_properties(x, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| collect_properties(x, out)),
            _ => {}
        }
    }

    /// The reconcilers and the preference writer name every value and
    /// field of their replies.
    #[test]
    fn other_memory_prompts_match_their_schemas() {
        use opencouch_memory::assist::{FactReconcileReply, PreferenceReply, RuleDecision};
        let cases: Vec<(MemoryPrompt, serde_json::Value, &[&str])> = vec![
            (
                MemoryPrompt::ReconcileFacts,
                opencouch_llm::strict_schema_for::<FactReconcileReply>(),
                &["bump", "supersede", "coexist", "low", "medium", "high"],
            ),
            (
                MemoryPrompt::ReconcileRules,
                opencouch_llm::strict_schema_for::<RuleDecision>(),
                &["append", "replace", "skip", "low", "medium", "high"],
            ),
            (
                MemoryPrompt::NormalizePreference,
                opencouch_llm::strict_schema_for::<PreferenceReply>(),
                &[],
            ),
        ];
        for (prompt, schema, values) in cases {
            let body = memory_prompt(prompt).expect("prompt");
            let mut fields = Vec::new();
            collect_properties(&schema, &mut fields);
            for n in fields
                .iter()
                .map(String::as_str)
                .chain(values.iter().copied())
            {
                assert!(
                    body.contains(&format!("`{n}`")),
                    "{} does not mention `{n}`",
                    prompt.as_str()
                );
            }
        }
    }
}
