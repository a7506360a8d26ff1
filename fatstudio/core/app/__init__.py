"""The application model (Qt-free, psygnal-evented): the settings, the training state, the focus every view
shows and the job system; the panels subscribe to it and call it."""
