"""The command line in Chinese (FTUI_LANG=zh): help, usage errors, `ftui watch` and `ftui runs`;
and still English with FTUI_LANG=en. Option names, key names and status words stay as they are."""

import os
import subprocess
import sys

import pytest
from rich.cells import cell_len

from tests.fixtures_runs import write_run

FTUI = [sys.executable, "-m", "ftui.cli.main"]


def ftui(*args: str, lang: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "FTUI_LANG": lang, "COLUMNS": "80"}
    return subprocess.run([*FTUI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_help_is_chinese_and_fits_80_cells():
    main = ftui("--help", lang="zh")
    assert main.returncode == 0
    assert "在终端仪表盘中微调语言模型" in main.stdout and "退出码" in main.stdout
    assert "--root RUNS_ROOT" in main.stdout and "--config CONFIG.yaml" in main.stdout  # option names stay
    train = ftui("train", "--help", lang="zh")
    assert "覆盖一个配置键（可重复）" in train.stdout and "--set KEY=VALUE" in train.stdout
    assert "output_dir" in train.stdout  # a LLaMA-Factory key stays as it is
    for out in (main.stdout, train.stdout):  # wrapped by cells: a CJK character takes two
        # (a path longer than a line, such as the default runs root under pytest's tmp, cannot be broken)
        assert all(cell_len(line) <= 80 for line in out.splitlines() if max(map(cell_len, line.split()), default=0) < 40)


def test_help_stays_english_with_ftui_lang_en():
    out = ftui("train", "--help", lang="en").stdout
    assert "override a config key (repeatable)" in out and "覆盖" not in out


def test_usage_errors_of_predict_and_export_are_chinese_with_exit_2(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "done-1", steps=3, max_steps=3, end="completed")
    predict = ftui("predict", "--dataset", "alpaca_en_demo", "--root", str(root), lang="zh")
    assert predict.returncode == 2
    assert "ftui predict：请给出一个运行（ID 或目录）或 --model PATH，不能同时给出" in predict.stderr
    missing = ftui("export", "nope", "--out", str(tmp_path / "out"), "--root", str(root), lang="zh")
    assert missing.returncode == 2 and "错误" in missing.stderr and "下没有运行 'nope'" in missing.stderr
    shard = ftui("export", "done-1", "--out", str(tmp_path / "out"), "--max-shard-size", "10KB", "--root", str(root), lang="zh")
    assert shard.returncode == 2 and "分片大小 '10KB' 小于 1MB" in shard.stderr
    english = ftui("predict", "--dataset", "alpaca_en_demo", "--root", str(root), lang="en")
    assert english.returncode == 2 and "give a run (id or directory) or --model PATH, not both" in english.stderr


def test_a_mistyped_command_or_choice_names_the_one_meant():
    """`ftui tarin` says train was meant (argparse before 3.14 only lists the choices), in the
    interface's language; a word like none of them still gets the list."""
    en = ftui("tarin", lang="en")
    assert en.returncode == 2 and "invalid choice: 'tarin'; did you mean 'train'?" in en.stderr
    zh = ftui("tarin", lang="zh")
    assert zh.returncode == 2 and "您是想输入 'train' 吗" in zh.stderr
    dtype = ftui("export", "r", "--out", "o", "--dtype", "bf61", lang="en")
    assert dtype.returncode == 2 and "did you mean 'bf16'?" in dtype.stderr
    far = ftui("zzz", lang="en")
    assert far.returncode == 2 and "did you mean" not in far.stderr and "choose from" in far.stderr and "train" in far.stderr


def test_watch_of_a_finished_run_prints_chinese_lines(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "done-1", steps=100, max_steps=100, end="completed", every=10)
    proc = ftui("watch", "done", "--root", str(root), "--interval", "0.05", lang="zh")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    # key names as events.jsonl spells them, in both languages
    assert lines[0].startswith("done-1: Qwen/Qwen2.5-0.5B lora ddp bf16 world_size=2 max_steps=100")
    assert any(line.startswith("第 50 步 eval_loss ") for line in lines)
    assert any(line.startswith("步 100/100 损失 ") and " 学习率 " in line for line in lines)
    # the status word stays English (scripts read it); the words around it are Chinese
    assert lines[-1].startswith("completed: ") and lines[-1].endswith("（第 100 步）")
    english = ftui("watch", "done", "--root", str(root), "--interval", "0.05", lang="en").stdout.splitlines()
    assert any(line.startswith("step 100/100 loss ") for line in english) and english[-1].endswith("(step 100)")


def test_runs_list_has_chinese_headings_aligned_by_cells(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "done-1", steps=3, max_steps=3, end="completed")
    write_run(root, "oom-1", steps=2, max_steps=3, end="failed")
    proc = ftui("runs", "--root", str(root), lang="zh")
    assert proc.returncode == 0
    header, *rows, why = proc.stdout.splitlines()
    assert why.startswith("oom-1：failed：OutOfMemoryError")  # under the table: why it failed
    assert header.split() == ["运行", "状态", "模型", "微调方法", "引擎", "步", "损失", "开始于", "用时"]
    assert {row.split()[1] for row in rows} == {"completed", "failed"}  # statuses as the run says them
    # the model column starts at the same cell in every line (a CJK heading takes two cells a character)
    starts = {cell_len(line[:line.index(model)]) for line, model in zip([header, *rows], ["模型", "Qwen", "Qwen"])}
    assert len(starts) == 1


@pytest.mark.parametrize("width", [24, 40, 80])
def test_wrap_cells_keeps_every_line_within_the_width(width):
    from ftui.cli.help import wrap_cells

    text = "将运行的 final/ 或检查点合并为独立的模型目录（safetensors、分词器、Modelfile；加 --gguf 时还有 GGUF）。"
    lines = wrap_cells(text, width)
    assert all(cell_len(line) <= width for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")  # nothing lost, broken at spaces or between CJK
    assert not any(line[0] in "，。；：）、" or line[-1] in "（" for line in lines)  # punctuation stays with its text
