-- dsh store, schema version 4: agent calls answered by agent hosts.
--
-- A run's calls to a pooled provider (`[store] pools`) are rows here,
-- named as the journal names them: (run, key, n), the n-th call with
-- content key `key` in call order, the same in every attempt of the run.
-- The process running the run inserts the row and waits for its answer;
-- an attempt that continues the run after its host died finds the row the
-- last one inserted (answered, or still being answered) instead of
-- starting the call twice.
--
-- An agent host (`dsh workflow host --agents POOL=N`) claims queued calls
-- of its pools (`FOR UPDATE SKIP LOCKED`) under a lease its heartbeat
-- renews, runs each with its own provider of the pool's name, and writes
-- the answer fenced by `claims`: a host paused past its lease, whose call
-- another host claimed since, writes nothing.

CREATE TABLE dsh_calls (
    run_id      text NOT NULL REFERENCES dsh_runs (id) ON DELETE CASCADE,
    key         text NOT NULL,
    n           integer NOT NULL,
    -- The provider that answers it, by name: the pool.
    pool        text NOT NULL,
    -- The call as the provider is given it (prompt, schema, options, the
    -- agent type's system prompt and tools), prepared by the run's host.
    request     jsonb NOT NULL,
    -- 'queued', 'running' (an agent host holds it by its lease), 'settled'.
    state       text NOT NULL DEFAULT 'queued',
    claims      integer NOT NULL DEFAULT 0,
    owner       text,
    lease_until timestamptz,
    -- The last sign of life its agent host passed on (the call's stall
    -- bound is kept by the run's host from it).
    active_at   timestamptz,
    -- A cancel asked by the run's host (or with the run's): the reason.
    cancel_requested text,
    -- The answer, as a journal's `outcome`, with its usage and child id.
    outcome     jsonb,
    usage       jsonb,
    child_id    text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    settled_at  timestamptz,
    PRIMARY KEY (run_id, key, n)
);
CREATE INDEX dsh_calls_claimable ON dsh_calls (pool, created_at)
    WHERE state IN ('queued', 'running');

-- Wake-ups: agent hosts listen for queued calls (payload: the pool) and
-- cancels (the run), the process running a run for answers (the run).
CREATE FUNCTION dsh_calls_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'queued' AND (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM 'queued') THEN
        PERFORM pg_notify('dsh_call_queued', NEW.pool);
    END IF;
    IF NEW.cancel_requested IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.cancel_requested IS NULL) THEN
        PERFORM pg_notify('dsh_call_cancel', NEW.run_id);
    END IF;
    IF NEW.state = 'settled' AND (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM 'settled') THEN
        PERFORM pg_notify('dsh_call_settled', NEW.run_id);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER dsh_calls_notify
    AFTER INSERT OR UPDATE OF state, cancel_requested ON dsh_calls
    FOR EACH ROW EXECUTE FUNCTION dsh_calls_notify();
