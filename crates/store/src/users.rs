//! API users (`opencouch users`, `opencouch serve`): the [`UserStore`]
//! implementations, in memory and (once for SQLite and PostgreSQL) in SQL.
//!
//! Only the SHA-256 of a bearer token is stored (64 lowercase hex
//! characters, checked here so a raw token can never be written by
//! mistake). A revoked user keeps its row with `revoked_at` set; at most one
//! *active* user per name (a partial unique index in SQL), so re-adding a
//! revoked name issues a new token for the same owner.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::{StoreError, StoreResult};
use crate::memory::MemoryBackend;
use crate::records::ApiUser;
use crate::sql::{SqlBackend, SqlRow, Stmt, conflict};
use crate::traits::UserStore;

/// The longest user name a store accepts.
pub const MAX_USER_NAME_CHARS: usize = 64;

/// Checks what every backend refuses alike.
fn check(user: &ApiUser) -> StoreResult<()> {
    let n = user.name.chars().count();
    if n == 0 || n > MAX_USER_NAME_CHARS {
        return Err(StoreError::Invalid("user name must be 1-64 characters"));
    }
    if !is_token_hash(&user.token_sha256) {
        return Err(StoreError::Invalid(
            "token_sha256 must be 64 lowercase hex characters",
        ));
    }
    Ok(())
}

/// Whether `s` looks like a hex SHA-256 (64 lowercase hex characters).
pub fn is_token_hash(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[async_trait]
impl UserStore for MemoryBackend {
    async fn add_user(&self, user: &ApiUser) -> StoreResult<()> {
        check(user)?;
        let mut users = self.users();
        let taken = users.iter().any(|u| {
            u.token_sha256 == user.token_sha256
                || (u.name == user.name && u.revoked_at.is_none() && user.revoked_at.is_none())
        });
        if taken {
            return Err(StoreError::Conflict { what: "api user" });
        }
        users.push(user.clone());
        Ok(())
    }

    async fn list_users(&self) -> StoreResult<Vec<ApiUser>> {
        Ok(self.users().clone())
    }

    async fn revoke_user(&self, name: &str, at: DateTime<Utc>) -> StoreResult<bool> {
        let mut users = self.users();
        match users
            .iter_mut()
            .find(|u| u.name == name && u.revoked_at.is_none())
        {
            Some(u) => {
                u.revoked_at = Some(at);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn active_user_by_token(&self, token_sha256: &str) -> StoreResult<Option<ApiUser>> {
        Ok(self
            .users()
            .iter()
            .find(|u| u.token_sha256 == token_sha256 && u.revoked_at.is_none())
            .cloned())
    }

    async fn has_active_users(&self) -> StoreResult<bool> {
        Ok(self.users().iter().any(|u| u.revoked_at.is_none()))
    }
}

const USER_COLUMNS: &str = "name, token_sha256, created_at, revoked_at";

fn user_from_row(row: &impl SqlRow) -> StoreResult<ApiUser> {
    const T: &str = "api_users";
    Ok(ApiUser {
        name: row.text("name")?,
        token_sha256: row.text("token_sha256")?,
        created_at: row.ts(T, "created_at")?,
        revoked_at: row.opt_ts(T, "revoked_at")?,
    })
}

#[async_trait]
impl<B: SqlBackend> UserStore for B {
    async fn add_user(&self, user: &ApiUser) -> StoreResult<()> {
        check(user)?;
        let stmt = Stmt::new(
            "INSERT INTO api_users (name, token_sha256, created_at, revoked_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(&user.name)
        .bind(&user.token_sha256)
        .bind(user.created_at)
        .bind(user.revoked_at);
        self.execute(stmt)
            .await
            .map_err(|e| conflict(e, "api user"))?;
        Ok(())
    }

    async fn list_users(&self) -> StoreResult<Vec<ApiUser>> {
        let stmt = Stmt::new(format!(
            "SELECT {USER_COLUMNS} FROM api_users ORDER BY insertion_order"
        ));
        let rows = self.fetch_all(stmt).await?;
        rows.iter().map(user_from_row).collect()
    }

    async fn revoke_user(&self, name: &str, at: DateTime<Utc>) -> StoreResult<bool> {
        let stmt = Stmt::new(
            "UPDATE api_users SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL",
        )
        .bind(name)
        .bind(at);
        Ok(self.execute(stmt).await? > 0)
    }

    async fn active_user_by_token(&self, token_sha256: &str) -> StoreResult<Option<ApiUser>> {
        let stmt = Stmt::new(format!(
            "SELECT {USER_COLUMNS} FROM api_users WHERE token_sha256 = $1 AND revoked_at IS NULL"
        ))
        .bind(token_sha256);
        let row = self.fetch_optional(stmt).await?;
        row.as_ref().map(user_from_row).transpose()
    }

    async fn has_active_users(&self) -> StoreResult<bool> {
        let stmt =
            Stmt::new("SELECT EXISTS (SELECT 1 FROM api_users WHERE revoked_at IS NULL) AS active");
        self.fetch_one(stmt).await?.flag("active")
    }
}

#[cfg(test)]
mod tests {
    use super::is_token_hash;

    #[test]
    fn token_hashes_are_recognized() {
        for (s, ok) in [
            (&"a".repeat(64)[..], true),
            (&"0123456789abcdef".repeat(4)[..], true),
            (&"A".repeat(64)[..], false),
            (&"a".repeat(63)[..], false),
            (&"g".repeat(64)[..], false),
            ("", false),
        ] {
            assert_eq!(is_token_hash(s), ok, "{s}");
        }
    }
}
