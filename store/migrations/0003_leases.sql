-- dsh store, schema version 3: leases, fencing and wake-ups.
--
-- A host holds a run by its lease: `lease_until`, renewed by the host's
-- heartbeat. A 'running' run whose lease has passed lost its host, and
-- another claims it. `claims` is the fence: every write of a run's
-- journal, events, record or result names the claim it is made under,
-- and a write under an older claim than the run's is refused.

ALTER TABLE dsh_runs ADD COLUMN lease_until timestamptz;

-- Runs made before leases: a 'running' one has no lease, so any host
-- may take it (its host held it by a session lock, gone with 0002).
DROP INDEX IF EXISTS dsh_runs_claimable;
-- What a claim searches: the queue, runs under a lease, and foreground
-- runs (`run --store`, 'local') whose process may die.
CREATE INDEX dsh_runs_claimable ON dsh_runs (created_at, id)
    WHERE state IN ('queued', 'running', 'local');

-- Wake-ups: a host listens for queued runs and cancels, `wait` for
-- results, instead of asking every so often. The poll stays, slower, for
-- a notice missed while a connection was down.
CREATE FUNCTION dsh_runs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'queued' AND (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM 'queued') THEN
        PERFORM pg_notify('dsh_queued', NEW.id);
    END IF;
    IF NEW.cancel_requested IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.cancel_requested IS NULL) THEN
        PERFORM pg_notify('dsh_cancel', NEW.id);
    END IF;
    IF NEW.result IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.result IS DISTINCT FROM NEW.result) THEN
        PERFORM pg_notify('dsh_settled', NEW.id);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER dsh_runs_notify
    AFTER INSERT OR UPDATE OF state, cancel_requested, result ON dsh_runs
    FOR EACH ROW EXECUTE FUNCTION dsh_runs_notify();
