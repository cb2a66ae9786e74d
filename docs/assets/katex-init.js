// Typesets the formulas pymdownx.arithmatex marks (\( … \) inline, \[ … \] displayed) with the KaTeX bundled
// into the site (orchestrator/docs/katex.py), on every page Material shows.
document$.subscribe(({ body }) => {
  for (const element of body.querySelectorAll(".arithmatex")) {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    });
  }
});
