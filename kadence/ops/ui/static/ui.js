// The timeline's bars are placed here, from data-at="left width" (percent of the run's span): the
// pages' Content-Security-Policy allows no inline style. Clicking a bar or point shows its events.
document.querySelectorAll(".timeline [data-at]").forEach((element) => {
  const [left, width] = element.dataset.at.split(" ");
  element.style.left = left + "%";
  if (width !== undefined) element.style.width = width + "%";
});

document.addEventListener("click", (event) => {
  const target = event.target.closest("[data-events]");
  if (!target) return;
  document.querySelectorAll("tr.highlight").forEach((row) => row.classList.remove("highlight"));
  const rows = target.dataset.events.split(" ").map((id) => document.getElementById("event-" + id)).filter(Boolean);
  rows.forEach((row) => row.classList.add("highlight"));
  if (rows.length) rows[0].scrollIntoView({ behavior: "smooth", block: "center" });
});
