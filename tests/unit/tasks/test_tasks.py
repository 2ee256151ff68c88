"""Tasks: verifiers, held-out split, JSONL and module:Class loading."""

import itertools
import json

import pytest

from echo2.tasks import ArithmeticTask, Example, JsonlTask, load_task


def test_arithmetic_examples_are_correct_and_split():
    task = ArithmeticTask(num_operands=3, max_operand=20)
    train = list(itertools.islice(task.train_examples(seed=1), 2000))
    held_out = task.eval_examples(500)
    assert len({e.prompt for e in held_out}) == 500
    assert not {e.prompt for e in train} & {e.prompt for e in held_out}
    for example in train[:50]:
        assert str(eval(example.prompt[:-1])) == example.answer  # noqa: S307
    assert task.eval_examples(500) == held_out  # fixed


def test_arithmetic_reward_and_exact_match():
    task = ArithmeticTask(partial_credit=0.5)
    example = Example("12+30-2=", "40")
    assert task.reward(example, "40") == 1.0 and task.is_correct(example, " 40")
    assert task.reward(example, "x") == 0.0
    assert task.reward(example, "39") == pytest.approx(0.5 * (1 - 1 / 50))
    assert not task.is_correct(example, "39")
    assert ArithmeticTask().reward(example, "39") == 0.0


def test_worked_solutions_reduce_step_by_step_and_score_on_the_final_answer():
    task = ArithmeticTask()
    assert task.worked_solution(Example("37+8-52=", "-7")) == "<think>45-52=-7"
    assert task.worked_solution(Example("5-9*2+1=", "-12")) == "<think>5-18+1=-13+1=-12"  # precedence
    example = Example("37+8-52=", "-7")
    assert task.reward(example, "<think>45-52=-7") == 1.0 and task.is_correct(example, "<think>45-52=-7")
    assert task.reward(example, "<think>45-52=-8") == 0.0  # the final answer decides
    assert task.reward(example, "<think>45-52=") == 0.0  # no final answer
    for prompt in ["1+2=", "99-98*97+3=", "0*0-5="]:
        answer = str(eval(prompt[:-1]))  # noqa: S307
        assert task.is_correct(Example(prompt, answer), task.worked_solution(Example(prompt, answer)))


def test_arithmetic_rejects_bad_options():
    with pytest.raises(ValueError, match="num_operands"):
        ArithmeticTask(num_operands=1)
    with pytest.raises(ValueError, match="operators"):
        ArithmeticTask(operators="/")


def test_jsonl_task(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"q{i}", "answer": str(i)}) for i in range(200)))
    task = load_task("jsonl", {"path": str(path)})
    held_out = task.eval_examples(1000)
    train = list(itertools.islice(task.train_examples(0), 200))
    assert held_out and not {e.prompt for e in held_out} & {e.prompt for e in train}
    assert task.reward(Example("q", "1,000"), "1000.0") == 1.0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        JsonlTask(str(bad))


def test_module_class_task_and_errors():
    task = load_task("echo2.tasks.arithmetic:ArithmeticTask", {"num_operands": 2})
    assert task.num_operands == 2
    with pytest.raises(ValueError, match="unknown task"):
        load_task("nope")
    with pytest.raises(ValueError, match="cannot import"):
        load_task("no.such.module:Task")
    with pytest.raises(ValueError, match="task.options"):
        load_task("arithmetic", {"bogus": 1})
