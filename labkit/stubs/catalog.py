"""The C exercises whose answers are the lab's own functions: each one's function, the file
that holds it, what in the lab runs it, and the tests that need its answer (the students'
edition leaves them out while csrc/ still holds the stub).  labkit.instructor.release.edition reads
this table; c_exercises and c_exercise_shed check the students' functions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Needs:
    """What in the lab runs an exercise's function: a server whose service is one of
    `services` (any, if empty), whose model is one of `models` (any, if empty) and that has
    one of `server_flags` set (any, if empty), at least one of the three given; a load
    generator writing with one of `strategies`; or csrc/bench's ev_bench built for one of
    `backends`.  labkit.exercises reads it."""

    services: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    server_flags: tuple[str, ...] = ()
    strategies: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()

    def server(self, model: str, service: str, flags: dict) -> bool:
        if not (self.services or self.models or self.server_flags):
            return False
        return ((not self.services or service in self.services) and (not self.models or model in self.models)
                and (not self.server_flags or any(flags.get(flag) for flag in self.server_flags)))

    def load(self, options: dict) -> bool:
        return options.get("strategy") in self.strategies


@dataclass(frozen=True)
class CExercise:
    """A C exercise whose answer is the lab's own function: the marked region of `function`
    in csrc/`source` is the solution, and the edition ships its stub.  In the edition the
    lab runs the student's own function (c_exercises puts it into csrc/ once its visible
    check passes); until then `uses` does not work, and the edition's `make test` leaves out
    `tests` (pytest node ids, fnmatch patterns) while csrc/ still holds the stub."""

    label: str      # as the notebook numbers it
    notebook: str
    function: str
    source: str     # under csrc/
    uses: str       # what in the lab runs it, in words
    tests: tuple[str, ...]
    needs: Needs = Needs()  # ... and as labkit.exercises matches it
    check: str = ""         # its visible check, "module:function" in labkit.exercises, given the code alone


# Which tests need which answer was found by running the edition's tests with the stubs,
# then again with the lab's own functions in csrc/ (all of them pass then).
_TOP_MODELS_BUT_ITERATIVE = ("aio", "busypoll", "epoll", "epoll_et", "epoll_reuseport", "epoll_workers", "fork", "pool",
                             "prefork", "select", "select_fork", "threaded", "uring")  # and poll: see ev_poll
_POLL_KIND_TESTS = (  # parametrized by server kind: their [poll] and [poll-...] cases
    "tests/exercises/test_battery.py::test_battery",
    "tests/servers/test_concurrency.py::test_2000_connections_through_loadgen_without_a_failure",
    "tests/servers/test_concurrency.py::test_a_silent_client_does_not_block_the_others",
    "tests/servers/test_concurrency.py::test_out_of_descriptors_sheds_the_excess_and_keeps_serving",
    "tests/servers/test_procs.py::test_each_model_starts_pinned_answers_and_stops",
    "tests/servers/test_protocol.py::test_abrupt_resets_do_not_disturb_the_server",
    "tests/servers/test_protocol.py::test_bad_request_gets_err_and_only_that_connection_closes",
    "tests/servers/test_protocol.py::test_client_that_never_reads_cannot_grow_the_server",
    "tests/servers/test_protocol.py::test_echo_returns_every_byte_in_order",
    "tests/servers/test_protocol.py::test_good_request_before_a_bad_one_is_answered",
    "tests/servers/test_protocol.py::test_names_with_spaces_parentheses_and_control_bytes",
    "tests/servers/test_protocol.py::test_request_then_half_close_gets_the_whole_reply",
    "tests/servers/test_protocol.py::test_several_requests_on_one_connection_and_pipelined",
    "tests/servers/test_protocol.py::test_sigterm_with_clients_connected",
    "tests/servers/test_protocol.py::test_sink_bad_put_gets_err",
    "tests/servers/test_protocol.py::test_sink_counts_bytes_and_reads_repeatably",
    "tests/servers/test_protocol.py::test_top_1000_lists_every_process_with_its_real_name",
    "tests/servers/test_protocol.py::test_top_default_k_is_two_ranked_rows",
    "tests/servers/test_protocol.py::test_top_k_and_crlf",
    "tests/servers/test_uploads.py::test_a_body_cut_short_by_a_reset_leaves_the_server_serving_others",
    "tests/servers/test_uploads.py::test_every_model_takes_bodies_of_0_1_1mib_and_10mib",
    "tests/servers/test_uploads.py::test_pipelined_puts_on_one_connection_are_answered_in_order",
)

_LOOP_MODELS = ("select", "poll", "epoll", "epoll_et", "select_fork", "epoll_workers", "epoll_reuseport")

C_EXERCISES = (
    CExercise("1.1", "01_proc_service", "procstat_parse", "services/procstat.c",
              "the top service of every server model, build.top_processes() and build.parse_stat_line()", (
        "tests/exercises/test_battery.py::test_battery[[]*-top: one byte per segment[]]",
        "tests/exercises/test_battery.py::test_battery[[]*-top: pipelined, then another[]]",
        "tests/exercises/test_battery.py::test_battery[[]*-top: reads nothing until the output is full[]]",
        "tests/exercises/test_battery.py::test_battery[[]*-top: reset while output is queued[]]",
        "tests/exercises/test_battery.py::test_battery[[]*-top: split at every byte[]]",
        "tests/servers/test_build.py::test_parse_stat_line_keeps_spaces_and_parentheses_in_the_name",
        "tests/servers/test_build.py::test_parse_stat_line_matches_psutil_for_this_process",
        "tests/servers/test_build.py::test_top_processes_agrees_with_psutil",
        "tests/measurement/test_cli.py::test_a_small_sweep_prints_a_median_table_and_resumes[[]*",
        "tests/measurement/test_cli.py::test_sweep_writes_where_labkit_results_says_as_the_notebooks_do",
        "tests/servers/test_concurrency.py::test_a_silent_client_does_not_block_the_others[[]*",
        "tests/servers/test_concurrency.py::test_iterative_serves_one_client_at_a_time[[]*",
        "tests/loadgen/test_loadgen.py::test_against_the_threaded_server[[]*",
        "tests/notebooks/test_notebook_hygiene.py::test_papermill_killed_mid_sweep_leaves_nothing",
        "tests/notebooks/test_notebook_hygiene.py::test_papermill_timeout_leaves_nothing",
        "tests/notebooks/test_panel.py::test_run_button_measures_into_the_given_results_file",
        "tests/servers/test_procs.py::test_client_runs_pinned_and_counts[[]*",
        "tests/servers/test_procs.py::test_each_model_starts_pinned_answers_and_stops[[]*",
        "tests/servers/test_protocol.py::test_abrupt_resets_do_not_disturb_the_server[[]*",
        "tests/servers/test_protocol.py::test_bad_request_gets_err_and_only_that_connection_closes[[]*",
        "tests/servers/test_protocol.py::test_good_request_before_a_bad_one_is_answered[[]*",
        "tests/servers/test_protocol.py::test_names_with_spaces_parentheses_and_control_bytes[[]*",
        "tests/servers/test_protocol.py::test_request_then_half_close_gets_the_whole_reply[[]*",
        "tests/servers/test_protocol.py::test_several_requests_on_one_connection_and_pipelined[[]*",
        "tests/servers/test_protocol.py::test_sigterm_with_clients_connected[[]*",
        "tests/servers/test_protocol.py::test_top_1000_lists_every_process_with_its_real_name[[]*",
        "tests/servers/test_protocol.py::test_top_default_k_is_two_ranked_rows[[]*",
        "tests/servers/test_protocol.py::test_top_k_and_crlf[[]*",
        "tests/measurement/test_stacks.py::test_without_kernel_permission_the_stacks_are_user_only_and_say_so",
        "tests/measurement/test_sweep.py::test_failed_points_are_kept_and_measured_again",
        "tests/measurement/test_sweep.py::test_point_row_has_every_field_and_the_pinning_used",
        "tests/measurement/test_sweep.py::test_point_without_perf_says_where_counters_came_from",
        "tests/measurement/test_sweep.py::test_rows_are_written_as_measured_and_resume_skips_them",
        "tests/servers/test_workers.py::test_epoll_workers_share_the_listener_with_epollexclusive",
        "tests/servers/test_workers.py::test_pool_runs_a_fixed_number_of_threads",
        "tests/servers/test_workers.py::test_serves_exactly_n_clients_at_once[[]*",
        *(f"tests/servers/test_protocol.py::test_client_that_never_reads_cannot_grow_the_server[[]{model}{san}[]]"
          for model in _TOP_MODELS_BUT_ITERATIVE for san in ("", "-san")),
        "tests/notebooks/test_notebooks.py::test_01_*",
    ), Needs(services=("top",)), "procstat_parse:check_procstat_parse"),
    CExercise("1.2", "01_proc_service", "ev_poll", "loop/ev_poll.c",
              "the poll server model and the poll backend of csrc/bench", (
        *(f"{test}[[]{kind}" for test in _POLL_KIND_TESTS for kind in ("poll[]]", "poll-*")),
        "tests/measurement/test_bench.py::test_events_rows_per_backend_and_select_refuses_past_fd_setsize",
        "tests/measurement/test_bench.py::test_throughput_has_a_row_per_model_and_stores_the_sweeps_rows",
        "tests/servers/test_multiplexing.py::test_idle_point_holds_idle_connections_beside_an_open_loop",
        "tests/notebooks/test_notebooks.py::test_02_*",
    ), Needs(models=("poll",), backends=("poll",)), "ev_poll:check_poll_server"),
    CExercise("4.1", "04_write_strategies", "fill_iovec", "loadgen/strategies.c",
              "the load generator's --strategy writev", (
        "tests/measurement/test_independent_counts.py::test_tcp_segments_from_tcp_info_agree_with_nstat_in_the_clients_namespace"
        "[[]writev-15x100[]]",
        "tests/loadgen/test_write_strategies.py::test_every_byte_arrives_and_the_reported_reads_are_the_servers_own"
        "[[]writev[]]",
        "tests/loadgen/test_write_strategies.py::test_nagle_meets_delayed_ack_only_for_two_writes_without_nodelay"
        "[[]writev-off-False[]]",
        "tests/loadgen/test_write_strategies.py::test_write_calls_per_repetition_are_exact_by_perfs_count[[]writev-1[]]",
        "tests/notebooks/test_notebooks.py::test_04_*",
    ), Needs(strategies=("writev",)), "fill_iovec:check_fill_iovec"),
    CExercise("6.2", "06_what_breaks_first", "shed_idle", "loop/loop.c",
              "--idle-timeout in the event-loop models (select, poll, epoll, epoll_et and their workers)", (
        *(f"tests/servers/test_server_limits.py::test_idle_timeout_sheds_silent_clients_and_keeps_talkers[[]{model}-*"
          for model in _LOOP_MODELS),
        "tests/notebooks/test_notebooks.py::test_06_*",
    ), Needs(models=_LOOP_MODELS, server_flags=("idle-timeout",)), "shed_idle:check_shed_idle"),
)
