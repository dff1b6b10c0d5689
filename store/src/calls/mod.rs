//! The calls table (`dsh_calls`, schema version 4): agent calls of pooled
//! providers, answered by agent hosts. The statements of both sides are
//! here: the process running a run asks (`Store::ask`), looks at its
//! calls (`Store::look_calls`) and cancels them (`Store::cancel_call`),
//! each fenced by its claim on the run; an agent host claims calls
//! ([`Store::claim_calls`]), keeps them by a lease ([`Store::renew_calls`]),
//! and answers or hands them back, fenced by its claim on the call.
//!
//! What is built on them: [`crate::pool`] (the run's side, a provider)
//! and [`crate::agents`] (the agent host's loop).

pub(crate) mod wire;

use std::time::Duration;

use dsh_seam::CallSlot;
use serde_json::Value;

use crate::{Store, StoreError, bounds};

/// One call in the store: the n-th call with content key `key` of run
/// `run`, the same in every attempt of the run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallId {
    /// The run.
    pub run: String,
    /// The call's content key.
    pub key: String,
    /// Calls with the same key before it.
    pub n: i32,
}

impl CallId {
    /// Call `slot` of run `run`.
    pub fn of(run: &str, slot: &CallSlot) -> CallId {
        CallId {
            run: run.to_string(),
            key: slot.key.clone(),
            n: i32::try_from(slot.n).unwrap_or(i32::MAX),
        }
    }
}

impl std::fmt::Display for CallId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "run {} call {}#{}", self.run, short(&self.key), self.n)
    }
}

/// A key's first characters, enough to tell calls apart in a message.
fn short(key: &str) -> &str {
    key.get(..12).unwrap_or(key)
}

/// Where a call stands, as its run's process sees it ([`Store::look_calls`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallState {
    /// No agent host has it yet.
    Queued,
    /// An agent host runs it; the last sign of life it passed on (seconds
    /// since the epoch).
    Running {
        /// The host's name.
        owner: Option<String>,
        active_at: Option<f64>,
    },
    /// Answered: the journal's `outcome`, its usage and child id; or why
    /// the answer cannot be read.
    Settled(Result<Settled, String>),
    /// No row: it was deleted with its run.
    Gone,
}

/// A call's answer as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settled {
    pub outcome: Value,
    pub usage: Option<Value>,
    pub child_id: Option<String>,
}

/// A call an agent host claimed ([`Store::claim_calls`]).
#[derive(Debug)]
pub struct ClaimedCall {
    /// Which call.
    pub id: CallId,
    /// Its claim: the answer is written under it, or not at all.
    pub claims: i32,
    /// The request; why not, when it is past its bound or not a request.
    pub(crate) request: Result<wire::CallRequest, String>,
}

/// What an agent host's heartbeat found ([`Store::renew_calls`]).
#[derive(Debug, Default)]
pub struct CallRenewal {
    /// Calls this host no longer holds (another host claimed them, or they
    /// were settled or deleted): it must stop them and write nothing.
    pub lost: Vec<CallId>,
    /// Calls whose run's process asked for a cancel, with its reason.
    pub cancels: Vec<(CallId, String)>,
}

/// How many times a call is claimed without an answer before it is
/// given up: a call whose every host dies while answering it (it brings
/// its host down) must not take down one host after another for ever.
pub const MAX_CLAIMS: i32 = 5;

/// An answer too big to be a real one is refused by its length.
const ANSWER_BOUND: i64 = 64 << 20;

/// The outcomes a later attempt takes as they are (what a child said);
/// any other (a cancel, a fault, a refused start) is asked again.
const ANSWERED: &str = "outcome ?| array['text', 'structured', 'fail']";

impl Store {
    /// Asks for call `id` of a run this process holds under claim `fence`
    /// (`None`: unfenced): queues it for pool `pool`'s agent hosts with
    /// `request` — or, when an earlier attempt of the run asked for it
    /// already, keeps that (answered, queued or being answered; asked
    /// again only if it was cancelled or ended in a fault).
    pub(crate) async fn ask(
        &self,
        id: &CallId,
        fence: Option<i32>,
        pool: &str,
        request: &Value,
    ) -> Result<(), StoreError> {
        let sql = format!(
            "WITH fence AS (
                 SELECT 1 FROM dsh_runs WHERE id = $1 AND ($6::integer IS NULL OR claims = $6)
                 FOR SHARE),
             asked AS (
                 INSERT INTO dsh_calls (run_id, key, n, pool, request)
                 SELECT $1, $2, $3, $4, $5 FROM fence
                 ON CONFLICT (run_id, key, n) DO UPDATE
                     SET state = 'queued', pool = EXCLUDED.pool, request = EXCLUDED.request,
                         claims = dsh_calls.claims + 1, owner = NULL, lease_until = NULL,
                         active_at = NULL, cancel_requested = NULL, outcome = NULL,
                         usage = NULL, child_id = NULL, settled_at = NULL, created_at = now()
                     WHERE (dsh_calls.state <> 'settled' AND dsh_calls.cancel_requested IS NOT NULL)
                         OR (dsh_calls.state = 'settled' AND NOT dsh_calls.{ANSWERED})
                 RETURNING 1)
             SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM asked)"
        );
        let row = self
            .db()
            .await?
            .query_one(
                sql.as_str(),
                &[&id.run, &id.key, &id.n, &pool, request, &fence],
            )
            .await?;
        let fenced: i64 = row.get(0);
        if fenced == 0 {
            return Err(StoreError::Row {
                run: id.run.clone(),
                why: "another host claimed the run since this process started it (it was \
                      paused or cut off past its lease); its calls are that host's now"
                    .into(),
            });
        }
        Ok(())
    }

    /// Where each of `ids` stands. Rows past their bound are reported as
    /// unreadable, not read.
    pub(crate) async fn look_calls(
        &self,
        ids: &[CallId],
    ) -> Result<Vec<(CallId, CallState)>, StoreError> {
        let runs: Vec<&str> = ids.iter().map(|c| c.run.as_str()).collect();
        let keys: Vec<&str> = ids.iter().map(|c| c.key.as_str()).collect();
        let ns: Vec<i32> = ids.iter().map(|c| c.n).collect();
        let rows = self
            .db()
            .await?
            .query(
                "SELECT w.run_id, w.key, w.n, c.state, c.owner,
                     extract(epoch FROM c.active_at)::float8,
                     CASE WHEN octet_length(c.outcome::text) <= $4::bigint THEN c.outcome END,
                     octet_length(c.outcome::text)::bigint,
                     CASE WHEN octet_length(c.usage::text) <= 4096 THEN c.usage END,
                     CASE WHEN octet_length(c.child_id) <= 1024 THEN c.child_id END
                 FROM unnest($1::text[], $2::text[], $3::integer[]) AS w(run_id, key, n)
                 LEFT JOIN dsh_calls c USING (run_id, key, n)",
                &[&runs, &keys, &ns, &ANSWER_BOUND],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let id = CallId {
                    run: r.get(0),
                    key: r.get(1),
                    n: r.get(2),
                };
                let state: Option<String> = r.get(3);
                let state = match state.as_deref() {
                    None => CallState::Gone,
                    Some("queued") => CallState::Queued,
                    Some("running") => CallState::Running {
                        owner: r.get(4),
                        active_at: r.get(5),
                    },
                    Some("settled") => {
                        let len: Option<i64> = r.get(7);
                        CallState::Settled(match r.get::<_, Option<Value>>(6) {
                            Some(outcome) => Ok(Settled {
                                outcome,
                                usage: r.get(8),
                                child_id: r.get(9),
                            }),
                            None => Err(match len {
                                Some(n) => format!(
                                    "its answer in the store is {n} bytes, over the \
                                     {ANSWER_BOUND} a call's answer may be"
                                ),
                                None => "it is settled without an answer".into(),
                            }),
                        })
                    }
                    Some(other) => CallState::Settled(Err(format!(
                        "its row's state is {other:?}, which no dsh writes"
                    ))),
                };
                (id, state)
            })
            .collect())
    }

    /// Asks the agent host answering call `id` to cancel it (`reason`); a
    /// call still queued is settled as cancelled at once. Fenced by the
    /// claim on the run the call was asked under (`fence`): a process that
    /// lost the run cancels nothing of its successor's.
    pub(crate) async fn cancel_call(
        &self,
        id: &CallId,
        fence: Option<i32>,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.db()
            .await?
            .execute(
                "UPDATE dsh_calls c
                 SET cancel_requested = coalesce(c.cancel_requested, $4),
                     state = CASE WHEN c.state = 'queued' THEN 'settled' ELSE c.state END,
                     outcome = CASE WHEN c.state = 'queued' THEN '\"cancelled\"'::jsonb
                                    ELSE c.outcome END,
                     settled_at = CASE WHEN c.state = 'queued' THEN now() ELSE c.settled_at END
                 FROM dsh_runs r
                 WHERE c.run_id = $1 AND c.key = $2 AND c.n = $3 AND c.state <> 'settled'
                     AND r.id = c.run_id AND ($5::integer IS NULL OR r.claims = $5)",
                &[&id.run, &id.key, &id.n, &reason, &fence],
            )
            .await?;
        Ok(())
    }

    /// Claims, for agent host `host` and for `lease`, up to `max` calls of
    /// pool `pool`: queued ones, and ones whose agent host's lease has
    /// passed (it died, or was paused or cut off). Oldest first; agent
    /// hosts that claim together never take one call twice (`FOR UPDATE
    /// SKIP LOCKED`).
    pub async fn claim_calls(
        &self,
        host: &str,
        pool: &str,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<ClaimedCall>, StoreError> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let db = self.db().await?;
        // Calls cancelled while no agent host had them (queued, or their
        // host gone) are settled as cancelled, not left to be searched;
        // calls whose hosts went away `MAX_CLAIMS` times are given up.
        db.execute(
            "UPDATE dsh_calls SET state = 'settled', outcome = '\"cancelled\"'::jsonb,
                 settled_at = now(), lease_until = NULL
             WHERE pool = $1 AND cancel_requested IS NOT NULL
                 AND (state = 'queued' OR (state = 'running' AND lease_until < now()))",
            &[&pool],
        )
        .await?;
        db.execute(
            "UPDATE dsh_calls SET state = 'settled', settled_at = now(), lease_until = NULL,
                 outcome = jsonb_build_object('resultError', format(
                     'the call was claimed %s times by agent hosts of pool %s and never answered \
                      (each host died, or was cut off, while answering it); it is not tried again',
                     claims, pool))
             WHERE pool = $1 AND state = 'running' AND lease_until < now() AND claims >= $2",
            &[&pool, &MAX_CLAIMS],
        )
        .await?;
        let rows = db
            .query(
                "UPDATE dsh_calls c SET state = 'running', owner = $1, claims = c.claims + 1,
                     lease_until = now() + make_interval(secs => $3), active_at = now()
                 FROM (
                     SELECT run_id, key, n FROM dsh_calls
                     WHERE pool = $2 AND cancel_requested IS NULL
                         AND (state = 'queued'
                              OR (state = 'running' AND lease_until < now()))
                     ORDER BY created_at, run_id, key, n
                     LIMIT $4
                     FOR UPDATE SKIP LOCKED) AS w
                 WHERE c.run_id = w.run_id AND c.key = w.key AND c.n = w.n
                 RETURNING c.run_id, c.key, c.n, c.claims,
                     CASE WHEN octet_length(c.request::text) <= $5::bigint THEN c.request END,
                     octet_length(c.request::text)::bigint",
                &[&host, &pool, &lease.as_secs_f64(), &max, &bounds::CALL],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let request = match r.get::<_, Option<Value>>(4) {
                    Some(v) => serde_json::from_value(v)
                        .map_err(|e| format!("its request is not a call dsh writes: {e}")),
                    None => Err(format!(
                        "its request is {} bytes, over the {} bytes an agent host reads",
                        r.get::<_, Option<i64>>(5).unwrap_or(0),
                        bounds::CALL
                    )),
                };
                ClaimedCall {
                    id: CallId {
                        run: r.get(0),
                        key: r.get(1),
                        n: r.get(2),
                    },
                    claims: r.get(3),
                    request,
                }
            })
            .collect())
    }

    /// The agent host's heartbeat: extends by `lease` the lease of each
    /// call in `held` (with its claim) that `host` still holds, marks
    /// those `active` (it showed signs of life since the last heartbeat)
    /// as active now, and says which it lost and which a cancel was asked
    /// for.
    pub async fn renew_calls(
        &self,
        host: &str,
        lease: Duration,
        held: &[(CallId, i32, bool)],
    ) -> Result<CallRenewal, StoreError> {
        if held.is_empty() {
            return Ok(CallRenewal::default());
        }
        let runs: Vec<&str> = held.iter().map(|c| c.0.run.as_str()).collect();
        let keys: Vec<&str> = held.iter().map(|c| c.0.key.as_str()).collect();
        let ns: Vec<i32> = held.iter().map(|c| c.0.n).collect();
        let claims: Vec<i32> = held.iter().map(|c| c.1).collect();
        let active: Vec<bool> = held.iter().map(|c| c.2).collect();
        let rows = self
            .db()
            .await?
            .query(
                "UPDATE dsh_calls c SET lease_until = now() + make_interval(secs => $2),
                     active_at = CASE WHEN h.active THEN now() ELSE c.active_at END
                 FROM unnest($3::text[], $4::text[], $5::integer[], $6::integer[], $7::bool[])
                     AS h(run_id, key, n, claims, active)
                 WHERE c.run_id = h.run_id AND c.key = h.key AND c.n = h.n
                     AND c.claims = h.claims AND c.owner = $1 AND c.state = 'running'
                 RETURNING c.run_id, c.key, c.n, c.cancel_requested",
                &[
                    &host,
                    &lease.as_secs_f64(),
                    &runs,
                    &keys,
                    &ns,
                    &claims,
                    &active,
                ],
            )
            .await?;
        let mut kept = std::collections::HashMap::new();
        for r in &rows {
            let id = CallId {
                run: r.get(0),
                key: r.get(1),
                n: r.get(2),
            };
            kept.insert(id, r.get::<_, Option<String>>(3));
        }
        let mut renewal = CallRenewal::default();
        for (id, ..) in held {
            match kept.get(id) {
                None => renewal.lost.push(id.clone()),
                Some(Some(reason)) => renewal.cancels.push((id.clone(), reason.clone())),
                Some(None) => {}
            }
        }
        Ok(renewal)
    }

    /// The cancels asked for the calls of run `run` that `host` holds.
    pub async fn call_cancels(
        &self,
        host: &str,
        run: &str,
    ) -> Result<Vec<(CallId, String)>, StoreError> {
        let rows = self
            .db()
            .await?
            .query(
                "SELECT key, n, cancel_requested FROM dsh_calls
                 WHERE run_id = $1 AND owner = $2 AND state = 'running'
                     AND cancel_requested IS NOT NULL",
                &[&run, &host],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    CallId {
                        run: run.to_string(),
                        key: r.get(0),
                        n: r.get(1),
                    },
                    r.get(2),
                )
            })
            .collect())
    }

    /// Writes call `id`'s answer under claim `claims`: `false` when the
    /// claim is no longer the call's (another host claimed it since) and
    /// nothing was written.
    pub async fn answer_call(
        &self,
        id: &CallId,
        claims: i32,
        outcome: &Value,
        usage: Option<&Value>,
        child_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        let n = self
            .db()
            .await?
            .execute(
                "UPDATE dsh_calls SET state = 'settled', outcome = $5, usage = $6,
                     child_id = $7, settled_at = now(), lease_until = NULL
                 WHERE run_id = $1 AND key = $2 AND n = $3 AND claims = $4
                     AND state = 'running'",
                &[&id.run, &id.key, &id.n, &claims, outcome, &usage, &child_id],
            )
            .await?;
        Ok(n == 1)
    }

    /// Hands call `id` back to the queue (this agent host is stopping
    /// before it answered): another agent host takes it at once instead of
    /// after the lease — or, when its cancel was asked meanwhile, settles
    /// it as cancelled. Nothing if the claim is no longer this host's.
    pub async fn hand_back_call(&self, id: &CallId, claims: i32) -> Result<(), StoreError> {
        self.db()
            .await?
            .execute(
                "UPDATE dsh_calls SET lease_until = NULL,
                     state = CASE WHEN cancel_requested IS NULL THEN 'queued' ELSE 'settled' END,
                     owner = CASE WHEN cancel_requested IS NULL THEN NULL ELSE owner END,
                     outcome = CASE WHEN cancel_requested IS NULL THEN outcome
                                    ELSE '\"cancelled\"'::jsonb END,
                     settled_at = CASE WHEN cancel_requested IS NULL THEN settled_at
                                       ELSE now() END
                 WHERE run_id = $1 AND key = $2 AND n = $3 AND claims = $4
                     AND state = 'running'",
                &[&id.run, &id.key, &id.n, &claims],
            )
            .await?;
        Ok(())
    }
}
