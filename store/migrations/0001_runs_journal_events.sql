-- dsh store, schema version 1: runs, their call journals and their events.
--
-- The journal is the same lines as journal.jsonl, in order: the
-- content-keyed replay ((run, key, n): the n-th call with key K of an
-- attempt) is the journal layer's, unchanged, on whichever store.

CREATE TABLE dsh_runs (
    id          text PRIMARY KEY,
    -- run.json: name, script, hashes, args, meta, limits, sandbox, provider.
    info        jsonb NOT NULL,
    -- The script as it was run (what a resume runs again).
    source      text NOT NULL,
    attempt     integer NOT NULL DEFAULT 1,
    -- result.json once the attempt settled; NULL while it runs.
    result      jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dsh_runs_created ON dsh_runs (created_at DESC);

CREATE TABLE dsh_journal (
    run_id  text NOT NULL REFERENCES dsh_runs (id) ON DELETE CASCADE,
    seq     bigint NOT NULL,
    line    text NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE dsh_events (
    run_id  text NOT NULL REFERENCES dsh_runs (id) ON DELETE CASCADE,
    seq     bigint NOT NULL,
    event   text NOT NULL,
    PRIMARY KEY (run_id, seq)
);
