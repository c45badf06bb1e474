DROP TABLE graph_runs;
DROP TABLE graph_revisions;
DROP FUNCTION radar_refuse_revision_change();
DROP TABLE graphs;
