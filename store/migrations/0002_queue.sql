-- dsh store, schema version 2: runs submitted to hosts.
--
-- state: 'local' (run by the process that made it: `dsh workflow run
-- --store`), 'queued' (submitted, waiting for a host), 'running' (a host
-- claimed it), 'settled' (it has a result). The process that runs a run
-- holds a session advisory lock on its id (see docs/scale.md): a
-- 'running' run whose lock is free lost its host, and another takes it.

ALTER TABLE dsh_runs ADD COLUMN state text NOT NULL DEFAULT 'local';
-- What a host needs besides the record: the fixture's text, if any.
ALTER TABLE dsh_runs ADD COLUMN submission jsonb;
-- The host that claimed it last, and how many claims it has had.
ALTER TABLE dsh_runs ADD COLUMN owner text;
ALTER TABLE dsh_runs ADD COLUMN claims integer NOT NULL DEFAULT 0;
-- A cancel asked for from anywhere (`dsh workflow cancel`): the reason.
ALTER TABLE dsh_runs ADD COLUMN cancel_requested text;
UPDATE dsh_runs SET state = 'settled' WHERE result IS NOT NULL;
CREATE INDEX dsh_runs_claimable ON dsh_runs (created_at) WHERE state IN ('queued', 'running');
