"""The help of the groups commands: their descriptions and their longer options' texts (the tree: :mod:`._parser`)."""

from __future__ import annotations

RESET_HELP = (
    "Reset the selected partitions to one target, like kafka-consumer-groups --reset-offsets. As there, "
    "nothing changes without --execute. An applied reset bumps the group's generation, so live fenced "
    "consumers stop instead of overwriting it: unlike Kafka, resetting a live group is safe. In tables "
    "'earliest' and 'latest' are the placeholders -2 and -1, which a reader resolves to the log's start "
    "or end; - is no offset."
)
TO_DATETIME_HELP = (
    "the offsets the group had committed at that instant, from its history (e.g. 2024-01-31T10:00:00.000, "
    "2024-01-31T10:00:00Z or ...+02:00; a time without a UTC offset is taken as UTC): the group's own past "
    "position, where a partition that had no offset then gets the earliest placeholder (a reset never "
    "deletes an offset). With --bootstrap-server it means what kafka-consumer-groups means: the offsets of "
    "the first records with a timestamp at or after it"
)
BOOTSTRAP_HELP = (
    "a Kafka broker to ask, as kafka-consumer-groups does (the kafka extra): --to-datetime and --by-duration "
    "then mean record timestamps (each partition's first record at or after the instant, offsets_for_times; "
    "the log end where none is that recent), a whole --topic means every partition the broker has, and "
    "--to-offset is checked against the broker's log start and end"
)
CLAMP_HELP = (
    "set an offset outside the known [log start, log end] to the nearer bound (kafka-consumer-groups "
    "clamps silently; offsetstore warns and sets what you asked unless you give --clamp)"
)
EXPECTED_GENERATION_HELP = (
    "apply (or preview) the reset only while the group is at generation N, the one a --dry-run showed: "
    "if a consumer joined or another reset came in between, nothing changes and the command says the "
    "generation the group is at now (one group only)"
)
#: What every duration option takes (cli/_values.py parse_by_duration).
DURATION_FORMS = "PnDTnHnMnS as kafka takes it (PT1H30M, P1D) or 90s, 15m, 2h, 1d (a unit is required)"
BY_DURATION_HELP = (
    "like --to-datetime at now minus DURATION: the offsets the group had committed then, from its history. "
    + DURATION_FORMS
)
TO_CURRENT_HELP = (
    "keep each offset where it is (a placeholder resolves to a known watermark, an offset past a known "
    "log end is capped to it); applied, it only bumps the generation, which fences live writers"
)
HISTORY_HELP = (
    "The group's audit trail, newest first: consumers' commits, resets (an import is one), adoptions with "
    "their source, deletes and expiries. In PREVIOUS and NEW, - is no offset; 'earliest' and 'latest' "
    "are the placeholders -2 and -1. The contract writes both 'no offset' and the latest placeholder as -1; "
    "the table tells them apart from the partition's change before, where it is listed."
)
EXPORT_HELP = (
    "Write the group's offsets as topic,partition,offset lines with no header, the format of "
    "kafka-consumer-groups --reset-offsets --export, which 'import' and kafka-consumer-groups --from-file "
    "read back. Placeholders are written as their numbers (-2 earliest, -1 latest). --output json writes "
    "a JSON list instead."
)
IMPORT_HELP = (
    "Set the offsets of a topic,partition,offset file (kafka-consumer-groups --from-file; FILE - reads "
    "standard input), as 'export' writes it. Blank lines and a topic,partition,offset header are skipped; "
    "a malformed line rejects the whole file. Offsets are >= 0, or the placeholders -2 (earliest) and -1 "
    "(latest), which are set by a reset to that end (so they resolve to a known watermark, as "
    "'reset --to-earliest' does). With --execute every offset of the file is set in one reset, which bumps "
    "the generation and so fences live writers; the history records it as a reset (no consumer's commit: "
    "the status verdict waits for the consumer). To record where the offsets came from, 'adopt --from-file' "
    "does the same with the file named as its source. Partitions not in the file "
    "keep their offsets. A group,topic,partition,offset file (kafka-consumer-groups' export of several "
    "groups, 'reset --export' of several) sets each group it names with 'import FILE', or only GROUP's "
    "lines with 'import GROUP FILE'."
)
IDLE_FOR_HELP = f"groups with no commit, join or reset for this long: {DURATION_FORMS}"
IDLE_FOR_LIST_HELP = (
    "list instead the groups idle (no commit, join or reset) for this long, which 'expire' and the "
    f"server's --offsets-retention would expire (needs admin on --prefix): {DURATION_FORMS}"
)
EXPIRE_HELP = (
    "Expire the offsets of groups idle for --idle-for, as the server's --offsets-retention does (Kafka's "
    "offsets.retention.minutes): their offsets are removed and recorded in their history as "
    "CHANGE_KIND_EXPIRE; each group keeps its generation, so a rejoin gets a higher one. Nothing changes "
    "without --execute. At most 1000 groups, longest idle first; run again for more."
)
RESET_EXPORT_HELP = (
    "write the plan (each selected partition's new offset) to standard output as CSV instead of the table, "
    "as kafka-consumer-groups --reset-offsets --export does: topic,partition,offset lines for one group, "
    "group,topic,partition,offset lines for several (--group repeated, --all-groups); notes go to standard "
    "error. With --dry-run (the default) it plans; with --execute it applies and writes what it set"
)
DELETE_HELP = (
    "Delete the selected offsets (--all-topics deletes the group). Like 'reset' and 'import', and unlike "
    "kafka-consumer-groups, it only shows what it would delete until --execute is given."
)
