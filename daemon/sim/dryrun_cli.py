"""`admitd simulate --against LOG -f JOB.yaml`: would this job be admitted now, when, or never,
and what would it preempt; without writing anything. The I/O around `daemon.query.dryrun` (which the daemon's
`/answers/v1/simulate` answers with too).

The log is read to its last event (the state then, and the recorded runtimes), each Job of JOB.yaml is taken as
created at that moment, on its own (not together with the file's other jobs), and the engine decides as the daemon
would. Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from daemon.domain.state import State
from daemon.eventlog import EventLogError, LogReader
from daemon.query.dryrun import DryRunError, answer, jobs_of, text
from daemon.views.follow import Following
from daemon.views.runtimes import Runtimes


def cmd_dry_run(args: argparse.Namespace) -> int:
    if args.job_file is None:
        print("admitd: a dry run needs -f JOB.yaml: the job to try", file=sys.stderr)
        return 2
    try:
        content = args.job_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        print(f"admitd: {args.job_file}: not UTF-8 text ({e.reason} at byte {e.start})", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"admitd: {args.job_file}: {e.strerror or e}", file=sys.stderr)
        return 2
    try:
        with LogReader(args.against) as reader:
            bounds = reader.bounds()
            if bounds is None:
                print(f"admitd: {args.against}: the log has no events yet", file=sys.stderr)
                return 2
            state = State(pending_indexes=False)
            runtimes = Runtimes(state)
            Following(state, (runtimes,)).follow(reader)
    except EventLogError as e:
        print(f"admitd: {e}", file=sys.stderr)
        return 2
    try:
        jobs, problems = jobs_of(content, str(args.job_file), state)
        for line in problems:
            print(f"admitd: rejected: {line}", file=sys.stderr)
        body = answer(state, runtimes.durations, bounds[1], bounds[3], jobs)
    except DryRunError as e:
        print(f"admitd: {e}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(json.dumps(body) + "\n")
    else:
        print(text(body))
    return 0
