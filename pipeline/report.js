window.reportViews = {};  // the charts (const charts, written before this) drawn; a table sorted by a clicked heading
for (const [id, spec] of Object.entries(charts)) {
  vegaEmbed("#" + id, spec, {actions: false, renderer: "svg"})
    .then(result => { window.reportViews[id] = result.view; document.getElementById(id).dataset.drawn = "true"; })
    .catch(error => console.error("chart " + id + ": " + error));
}
for (const heading of document.querySelectorAll("table.sortable th[data-column]")) {
  heading.addEventListener("click", () => {
    const table = heading.closest("table"), column = Number(heading.dataset.column);
    const ascending = heading.dataset.order !== "ascending";
    for (const other of table.querySelectorAll("th[data-column]")) delete other.dataset.order;
    heading.dataset.order = ascending ? "ascending" : "descending";
    const key = row => row.cells[column].dataset.value ?? row.cells[column].textContent;
    const rows = [...table.tBodies[0].rows].sort((a, b) => {
      const [x, y] = [key(a), key(b)];
      if (x === "" || y === "") return (x === "") - (y === "");  // empty cells last either way
      const [p, q] = [Number(x), Number(y)];
      const order = isNaN(p) || isNaN(q) ? x.localeCompare(y) : p - q;
      return ascending ? order : -order;
    });
    table.tBodies[0].append(...rows);
  });
}
