"""Format parsers: pure functions from a file to its text units.

``parsers.registry`` is the entry point: ``file_info`` (cheap facts),
``select`` (which parser), ``parse`` (units or ParseFailed/UnsupportedFormat).
One module per format:

=================  ===========================================  ========================
module             formats                                      units
=================  ===========================================  ========================
``pdf``            PDF (PyMuPDF, pdfminer.six as second reader) ``page-0001.md``
``xlsx``           XLSX/XLSM (openpyxl, read-only, streaming)   ``sheet-<Name>.md``
``spreadsheet``    XLS/XLSB/ODS (calamine; xlrd for Excel 2-4)  ``sheet-<Name>.md``
``pptx``           PPTX/PPTM (python-pptx)                      ``slide-001.md``
``docx``           DOCX/DOCM (own WordprocessingML reader)      ``document.md``
``html``           HTML (markitdown)                            ``document.md``
``epub``           EPUB (markitdown)                            ``document.md``
``ipynb``          Jupyter notebooks (markitdown)               ``document.md``
``outlook``        Outlook .msg (markitdown, olefile)           ``document.md``
``legacy_office``  OLE .xls/.doc/.ppt: encrypted or declined    none
``delimited``      CSV/TSV: small as text, large by row ranges  ``rows-000001-005000.md``
``text``           text by extension, and sniffed UTF-8         ``content.txt``
=================  ===========================================  ========================

``zipguard`` checks every zip container before a library opens it (not a
zip, encrypted Office or OpenDocument, zip bombs, XML entity declarations).
"""
