// E2B's rich results in runCode, as e2b-dev/code-interpreter's tests
// check them: charts (js/tests/charts/*), DataFrame data (data.test.ts),
// display data (displayData.test.ts), display() calls and magics.
import assert from "node:assert/strict";
import { check, create, finish } from "../lib.mjs";

const sbx = await create();

async function chartOf(code) {
  const ex = await sbx.runCode(code);
  assert.equal(ex.error, undefined, ex.error?.traceback);
  const r = ex.results[0];
  assert.ok(r, "no result");
  assert.ok(r.png, "no png beside the chart");
  assert.ok(r.chart, `no chart: ${JSON.stringify(ex.results.map((x) => x.formats()))}`);
  return r.chart;
}

await check("charts/line.test.ts: line", async () => {
  const chart = await chartOf(`
import numpy as np
import matplotlib.pyplot as plt
import datetime
dates = [datetime.date(2023, 9, 1) + datetime.timedelta(seconds=i) for i in range(100)]
x = np.linspace(0, 2*np.pi, 100)
plt.figure(figsize=(10, 6))
plt.plot(dates, np.sin(x), label='sin(x)')
plt.plot(dates, np.cos(x), label='cos(x)')
plt.xlabel("Time (s)")
plt.ylabel("Amplitude (Hz)")
plt.title('Plot of sin(x) and cos(x)')
plt.show()
`);
  assert.equal(chart.type, "line");
  assert.equal(chart.title, "Plot of sin(x) and cos(x)");
  assert.deepEqual([chart.x_label, chart.y_label, chart.x_unit, chart.y_unit], ["Time (s)", "Amplitude (Hz)", "s", "Hz"]);
  assert.deepEqual([chart.x_scale, chart.y_scale], ["datetime", "linear"]);
  assert.ok(chart.x_ticks.every((t) => typeof t === "string" && !isNaN(new Date(t))));
  assert.ok(chart.y_ticks.every((t) => typeof t === "number"));
  assert.ok([...chart.x_tick_labels, ...chart.y_tick_labels].every((l) => typeof l === "string"));
  assert.equal(chart.elements.length, 2);
  const [a, b] = chart.elements;
  assert.deepEqual([a.label, b.label, a.points.length, b.points.length], ["sin(x)", "cos(x)", 100, 100]);
  assert.ok(a.points.every((p) => typeof p[0] === "string" && typeof p[1] === "number"));
  assert.deepEqual(new Date(a.points[0][0]), new Date("2023-09-01T00:00:00.000Z"));
});

await check("charts (python tests/charts/test_scale.py): a categorical axis", async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
plt.figure(figsize=(10, 6))
plt.plot([1, 2, 3, 4, 5], ['A', 'B', 'C', 'D', 'E'])
plt.show()
`);
  assert.deepEqual([chart.type, chart.x_scale, chart.y_scale], ["line", "linear", "categorical"]);
  assert.deepEqual(chart.elements[0].points[0], [1, "A"]);
});

await check("charts/bar.test.ts: bar", async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
authors = ['Author A', 'Author B', 'Author C', 'Author D']
sales = [100, 200, 300, 400]
plt.figure(figsize=(10, 6))
plt.bar(authors, sales, label='Books Sold', color='blue')
plt.xlabel('Authors')
plt.ylabel('Number of Books Sold')
plt.title('Book Sales by Authors')
plt.tight_layout()
plt.show()
`);
  assert.deepEqual([chart.type, chart.title, chart.x_label, chart.y_label, chart.x_unit, chart.y_unit], ["bar", "Book Sales by Authors", "Authors", "Number of Books Sold", null, null]);
  assert.deepEqual(chart.elements.map((b) => b.value), [100, 200, 300, 400]);
  assert.deepEqual(chart.elements.map((b) => b.group), Array(4).fill("Books Sold"));
  assert.deepEqual(chart.elements.map((b) => b.label), ["Author A", "Author B", "Author C", "Author D"]);
});

await check("charts/pie.test.ts: pie", async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
categories = ["No", "No, in blue"]
sizes = [90, 10]
fig, ax = plt.subplots(figsize=(8, 8))
plt.xlabel("x")
plt.ylabel("y")
ax.pie(sizes, labels=categories, autopct='%1.1f%%', startangle=90, colors=plt.cm.Pastel1.colors[:len(categories)])
ax.axis('equal')
plt.title('Will I wake up early tomorrow?')
plt.show()
`);
  assert.deepEqual([chart.type, chart.title], ["pie", "Will I wake up early tomorrow?"]);
  assert.deepEqual(chart.elements, [
    { label: "No", angle: 324, radius: 1 },
    { label: "No, in blue", angle: 36, radius: 1 },
  ]);
});

await check("charts/scatter.test.ts: scatter", async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
import numpy as np
N = 5
plt.xlabel("A")
plt.ylabel("B")
plt.scatter(np.random.rand(N), np.random.rand(N), c='blue', label='Dataset 1')
plt.scatter(np.random.rand(2*N), np.random.rand(2*N), c='red', label='Dataset 2')
plt.show()
`);
  assert.deepEqual([chart.type, chart.title, chart.x_label, chart.y_label], ["scatter", null, "A", "B"]);
  assert.ok([...chart.x_ticks, ...chart.y_ticks].every((t) => typeof t === "number"));
  assert.deepEqual(chart.elements.map((e) => [e.label, e.points.length]), [["Dataset 1", 5], ["Dataset 2", 10]]);
  assert.ok(chart.elements.every((e) => e.points.every((p) => typeof p[0] === "number" && typeof p[1] === "number")));
});

await check("charts/boxAndWhisker.test.ts: box-and-whisker", async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
data = {'Class A': [85, 90, 78, 92, 88], 'Class B': [95, 89, 76, 91, 84, 87], 'Class C': [75, 82, 88, 79, 86]}
fig, ax = plt.subplots(figsize=(10, 6))
ax.set_title('Exam Scores Distribution')
ax.set_xlabel('Class')
ax.set_ylabel('Score')
ax.boxplot(data.values(), labels=data.keys(), patch_artist=True)
ax.legend()
plt.tight_layout()
plt.show()
`);
  assert.deepEqual([chart.type, chart.title, chart.x_label, chart.y_label, chart.x_unit, chart.y_unit], ["box_and_whisker", "Exam Scores Distribution", "Class", "Score", null, null]);
  const e = chart.elements;
  assert.deepEqual(e.map((b) => b.label), ["Class A", "Class B", "Class C"]);
  assert.deepEqual(e.map((b) => b.outliers), [[], [76], []]);
  assert.deepEqual(e.map((b) => b.min), [78, 84, 75]);
  assert.deepEqual(e.map((b) => b.first_quartile), [85, 84.75, 79]);
  assert.deepEqual(e.map((b) => b.median), [88, 88, 82]);
  assert.deepEqual(e.map((b) => b.third_quartile), [90, 90.5, 86]);
  assert.deepEqual(e.map((b) => b.max), [92, 95, 88]);
});

await check("charts/superchart.test.ts: superchart", async () => {
  const chart = await chartOf(`
import matplotlib.pyplot as plt
import numpy as np
x1 = np.linspace(0, 10, 100)
fig, axs = plt.subplots(1, 2, figsize=(10, 8))
fig.suptitle('Multiple Charts Example', fontsize=16)
axs[0].plot(x1, np.sin(x1), 'r')
axs[0].set_title('Sine Wave')
axs[0].grid(True)
axs[1].scatter(np.random.rand(5), np.random.rand(5), c='blue', label='Dataset 1')
axs[1].set_xlabel('X')
axs[1].set_ylabel('Y')
axs[1].set_title('Scatter Plot')
axs[1].grid(True)
plt.show()
`);
  assert.deepEqual([chart.type, chart.title, chart.elements.length], ["superchart", "Multiple Charts Example", 2]);
  const [a, b] = chart.elements;
  assert.deepEqual([a.type, a.title, a.x_label, a.y_label, a.elements.length, a.elements[0].points.length], ["line", "Sine Wave", null, null, 1, 100]);
  assert.deepEqual([b.type, b.title, b.x_label, b.y_label, b.elements.length, b.elements[0].points.length], ["scatter", "Scatter Plot", "X", "Y", 1, 5]);
});

await check("data.test.ts: get data (a DataFrame's data, html and text)", async () => {
  const ex = await sbx.runCode(`
import pandas as pd
pd.DataFrame({"a": [1, 2, 3]})
`);
  const r = ex.results[0];
  assert.deepEqual(r.data, { a: [1, 2, 3] });
  assert.ok(r.html.includes("<table"), r.html);
  assert.ok(r.text.includes("a"), r.text);
  assert.equal(r.isMainResult, true);
});

await check("displayData.test.ts: display data (plt.show gives png, text, no extra)", async () => {
  const ex = await sbx.runCode(`
        import matplotlib.pyplot as plt
        import numpy as np

        x = np.linspace(0, 20, 100)
        plt.plot(x, np.sin(x))
        plt.show()
        `);
  const image = ex.results[0];
  assert.ok(image.png);
  assert.ok(image.text.startsWith("<Figure size"), image.text);
  assert.deepEqual(image.extra, {});
});

await check("display(): each call a result, in order, before the main result", async () => {
  const ex = await sbx.runCode(`
from IPython.display import display, HTML, Markdown
display(HTML("<b>one</b>"))
display(Markdown("**two**"))
display({"three": 3})
"main"
`);
  assert.equal(ex.error, undefined, ex.error?.traceback);
  assert.deepEqual(ex.results.map((r) => [r.isMainResult, r.html ?? r.markdown ?? r.json ?? r.text]), [
    [false, "<b>one</b>"],
    [false, "**two**"],
    [false, { three: 3 }],
    [true, "main"],
  ]);
});

await check("display(): a PIL image shown has its repr as text, not <Figure>", async () => {
  const ex = await sbx.runCode(`
from PIL import Image
img = Image.new("RGB", (8, 8), "red")
img.show()
`);
  const r = ex.results[0];
  assert.ok(r.png);
  assert.match(r.text, /^<PIL\.Image\.Image image mode=RGB size=8x8/);
});

await check("magics: !cmd runs as commands.run, in the interpreter's /home/user", async () => {
  const ex = await sbx.runCode("open('from_py.txt', 'w').write('py wrote this')\n!cat from_py.txt\n!echo $((6 * 7))");
  assert.equal(ex.error, undefined, ex.error?.traceback);
  assert.equal(ex.logs.stdout.join(""), "py wrote this42\n");
});

await check("magics: !cmd of a program the sandbox lacks prints the shell's error, as IPython does", async () => {
  // An E2B sandbox is a machine: any program of its root runs, and one it
  // lacks is the shell's "not found", not a refusal (sessions that keep an
  // allow-list raise PermissionError: TestCellShellEscapesGoThroughTheCommandPolicy).
  const ex = await sbx.runCode("!no-such-program-here -l 8080");
  assert.equal(ex.error, undefined, ex.error?.traceback);
  assert.match(ex.logs.stdout.join("") + ex.logs.stderr.join(""), /no-such-program-here: (command )?not found/);
});

await check("magics: an unknown magic is IPython's UsageError", async () => {
  const ex = await sbx.runCode("%foo bar");
  assert.equal(ex.error?.name, "UsageError");
  assert.equal(ex.error.value, "Line magic function `%foo` not found.");
});

await check("magics: %time runs the line and prints its times; %pwd is a value", async () => {
  const ex = await sbx.runCode("%time y = sum(range(1000))\n%pwd");
  assert.equal(ex.error, undefined, ex.error?.traceback);
  assert.match(ex.logs.stdout.join(""), /CPU times: user .*\nWall time: /);
  assert.equal(ex.text, "/home/user");
});

await check("magics: %pip install goes through pip_install (a blocked name is refused)", async () => {
  const ex = await sbx.runCode("%pip install 'git+https://example.com/x.git'");
  assert.ok(ex.error, "no error for a URL requirement");
  assert.match(`${ex.error.name}: ${ex.error.value}`, /PermissionError|UsageError/);
});

await finish();
